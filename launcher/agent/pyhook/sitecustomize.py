# drover's stack hook (written by `drover agent run`; see docs/triage.md).
# It registers a faulthandler dump of every thread on SIGUSR2 into a file
# of this process's own, DROVER_STACKS_DIR/<pid>-<start ticks>.txt, which
# `drover agent stacks` signals and reads: the stack of a live process,
# which goes on running. Then it imports the sitecustomize that this one
# hides on sys.path, if any, so that a user's or the distribution's runs
# as before.
import os as _os
import sys as _sys


def _drover_stacks_hook():
    d = _os.environ.get("DROVER_STACKS_DIR")
    if not d:
        return
    try:
        import faulthandler
        import signal

        try:
            with open("/proc/self/stat") as f:
                ticks = f.read().rsplit(")", 1)[1].split()[19]
        except Exception:
            ticks = "0"
        _os.makedirs(d, mode=0o700, exist_ok=True)
        p = _os.path.join(d, "%d-%s.txt" % (_os.getpid(), ticks))
        f = open(p, "w")
        try:
            faulthandler.register(signal.SIGUSR2, file=f, all_threads=True, chain=False)
            # Restart the system calls the dump interrupts where the
            # kernel can (read, connect, futex waits), so that C code
            # that does not retry on EINTR is less likely to see it.
            signal.siginterrupt(signal.SIGUSR2, False)
        except Exception:
            f.close()
            _os.unlink(p)
            return
        _sys.modules[__name__]._drover_stacks_file = f
    except Exception:
        pass


_drover_stacks_hook()
try:
    _os.register_at_fork(after_in_child=_drover_stacks_hook)
except Exception:
    pass


def _drover_chain():
    import importlib.machinery
    import importlib.util

    here = _os.path.dirname(_os.path.abspath(__file__))
    rest = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    mine = _sys.modules.get("sitecustomize")
    _sys.modules["sitecustomize"] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        if mine is not None:
            _sys.modules["sitecustomize"] = mine


_drover_chain()
