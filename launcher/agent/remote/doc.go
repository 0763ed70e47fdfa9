// Package remote is the controller's side of drover's agent: which local
// drover binary a host gets, putting it there, and calling it there. The
// agent itself (what runs on the host) is package agent; its argv builders
// live there too, so this package never spells a flag.
//
// # Which binary a host gets
//
// A host runs a drover built for its platform, learnt from `uname -sm`
// ("Linux aarch64" is linux/arm64). Agents finds the candidates: the agents
// `make build` puts beside the drover binary (drover-agent-linux-amd64,
// drover-agent-linux-arm64: static, so they run on any Linux, any glibc or
// none), else the running drover itself when its platform matches (a plain
// `go build` with CGO_ENABLED=0 is static too). A platform with neither is
// a *NoAgentError that names the build command that fixes it.
//
// # Installing
//
// Agents are named by content (~/.drover/bin/drover-<12 hex of sha256>), so
// several drover versions coexist and a host that has this one gets nothing
// uploaded. The whole install is one command (installScript): it prints the
// host's platform, home and the agents it has, creates the directories the
// caller asked for (saying which it made), and waits for drover's answer:
// nothing more to do, or the agent on its stdin. It writes that to a
// temporary name, runs it once (`drover agent version`) and only then
// renames it into place: a host that cannot execute it (wrong loader,
// noexec home) is a *CannotRunError carrying the loader's words, before any
// process starts, and a file under the final name that answers another
// version is replaced. One command rather than a state command, an upload
// and SFTP calls: a fresh host's install costs one command's round trips
// plus the upload, and the upload goes over a channel of its own, not the
// SFTP session the lease and the push use.
//
// # Calling it
//
// Client is the controller's one way to run an agent command on a host:
// a method per command (Run, Attach, Preflight, Stop, Runs, Since, Top,
// NetListen, NetSend, SFTP, StartRecv/StartSend, Health, Probe) builds
// its argv with package agent's builder and runs or starts it over the
// transport; answers read whole are bounded (Read), and a command run to
// its end is stopped on the host when the caller gives up (RunToEnd).
//
// # Probing
//
// Probe asks the agent for the host's GPUs (`drover agent probe --json`,
// NVML on the host) and falls back to nvidia-smi's CSV, parsed by package
// gpu, which knows nothing of transports.
package remote
