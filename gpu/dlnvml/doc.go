// Package dlnvml loads NVIDIA's management library, libnvidia-ml.so.1, at
// run time and implements gpu.NVML over it, without cgo.
//
// # Why purego, and why a package of its own
//
// go-nvml, which drover used before, needs cgo: a CGO_ENABLED=0 build (what
// `go install` gives on a machine without a C compiler, and every
// cross-build) did not compile, and a cgo build needs the build machine's
// glibc (2.34 on current distributions) on every host. NVML is only ever
// reached through dlopen anyway, so this package calls dlopen and the
// dozen NVML functions the probe needs with github.com/ebitengine/purego,
// which does that in Go for any GOOS/GOARCH pair, cross-built.
//
// The price: on Linux, purego links dlopen from the C library, so a binary
// that imports this package is dynamically linked (it needs a loader and a
// libc, any version). drover's agents must run on any Linux, glibc or not,
// so they are static and do not import this package; they run a small
// dynamic NVML reader (cmd/drover-nvml, carried inside the agent) when the
// host has a loader, that is whenever it can have an NVIDIA driver at all.
// A drover built with cgo is dynamic already and reads NVML in process.
//
// go-nvml stays a test dependency: package gpu's tests adapt its mocks,
// which keep testing the probe's logic without a GPU.
package dlnvml
