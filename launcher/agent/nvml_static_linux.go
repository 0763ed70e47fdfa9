//go:build !cgo

package agent

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"

	"github.com/droverhq/drover/gpu"
)

// readerTimeout bounds the NVML reader: NVML hangs on a wedged GPU.
const readerTimeout = time.Minute

// probeNVML reads NVML in a static binary, which cannot load a library:
// with a dynamic loader on the host (there is one wherever an NVIDIA
// driver can be), it runs the NVML reader this agent carries; otherwise,
// or without a reader (a plain `go build`), it says why NVML was not read,
// and the controller falls back to nvidia-smi.
//
// xidWait > 0 also waits that long for Xid events (LocalProber.XIDWait).
func probeNVML(host string, xidWait time.Duration) gpu.HostReport {
	rep := gpu.HostReport{Host: host, Source: gpu.SourceNone, Devices: []gpu.Device{}}
	reader, rerr := carriedReader()
	if len(reader) > 0 {
		interp, err := elfInterp(reader)
		if err == nil {
			if _, err = os.Stat(interp); err == nil {
				r, err := runReader(reader, xidWait)
				if err == nil {
					r.Host = host
					return r
				}
				rep.Reason = "nvml: run the NVML reader: " + err.Error()
				return rep
			}
		}
		rerr = err
	}
	lib := findLibrary(gpu.NVMLLibrary, os.Getenv("LD_LIBRARY_PATH"))
	switch {
	case lib == "":
		rep.Reason = gpu.NoDriverReason
	case rerr != nil:
		rep.Reason = fmt.Sprintf("nvml: %s is here, but this static drover cannot load it: %v", lib, rerr)
	default:
		rep.Reason = fmt.Sprintf("nvml: %s is here, but this static drover carries no NVML reader "+
			"(a plain go build; `make build` makes agents with one)", lib)
	}
	return rep
}

// elfInterp is the dynamic loader the ELF image b asks for.
func elfInterp(b []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return "", fmt.Errorf("the NVML reader is not an ELF file: %w", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			buf := make([]byte, p.Filesz)
			if _, err := p.ReadAt(buf, 0); err != nil {
				return "", fmt.Errorf("read the NVML reader's loader: %w", err)
			}
			return string(bytes.TrimRight(buf, "\x00")), nil
		}
	}
	return "", fmt.Errorf("the NVML reader names no dynamic loader")
}

// runReader runs the reader from memory (a memfd, so nothing is written
// on the host) and parses its report.
func runReader(reader []byte, xidWait time.Duration) (gpu.HostReport, error) {
	fd, err := unix.MemfdCreate("drover-nvml", unix.MFD_CLOEXEC|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // kernels before 6.3 know no MFD_EXEC
		fd, err = unix.MemfdCreate("drover-nvml", unix.MFD_CLOEXEC)
	}
	if err != nil {
		return gpu.HostReport{}, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "drover-nvml")
	defer f.Close()
	if _, err := f.Write(reader); err != nil {
		return gpu.HostReport{}, fmt.Errorf("write the reader to memory: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readerTimeout+xidWait)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, fmt.Sprintf("/proc/self/fd/%d", fd), "--xid-wait="+xidWait.String())
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := bytes.TrimSpace(stderr.Bytes()); len(msg) > 0 {
			return gpu.HostReport{}, fmt.Errorf("%w: %s", err, msg)
		}
		return gpu.HostReport{}, err
	}
	var rep gpu.HostReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return gpu.HostReport{}, fmt.Errorf("parse its report: %w", err)
	}
	if rep.Devices == nil {
		rep.Devices = []gpu.Device{}
	}
	return rep, nil
}
