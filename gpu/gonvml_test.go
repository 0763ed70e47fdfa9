//go:build cgo

package gpu

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// goNVMLLib adapts go-nvml's Interface to NVML. drover loads the library
// with package gpu/dlnvml, which needs no cgo; this adapter lets go-nvml's
// mocks (a DGX A100 model and function-field mocks) keep testing the probe
// and the selection rules. go-nvml needs cgo, hence the build tag: with
// cgo off these tests are left out.
func goNVMLLib(lib nvml.Interface) NVML { return goNVML{lib} }

type goNVML struct{ lib nvml.Interface }

func (g goNVML) Init() Return     { return Return(g.lib.Init()) }
func (g goNVML) Shutdown() Return { return Return(g.lib.Shutdown()) }

func (g goNVML) SystemGetDriverVersion() (string, Return) {
	v, ret := g.lib.SystemGetDriverVersion()
	return v, Return(ret)
}

func (g goNVML) SystemGetCudaDriverVersion() (int, Return) {
	v, ret := g.lib.SystemGetCudaDriverVersion()
	return v, Return(ret)
}

func (g goNVML) DeviceGetCount() (int, Return) {
	n, ret := g.lib.DeviceGetCount()
	return n, Return(ret)
}

func (g goNVML) DeviceGetHandleByIndex(i int) (NVMLDevice, Return) {
	d, ret := g.lib.DeviceGetHandleByIndex(i)
	if d == nil {
		return nil, Return(ret)
	}
	return goDevice{d}, Return(ret)
}

// HasSymbol asks go-nvml's extension; a library (or mock) without one
// cannot say, so the caller asks the query itself.
func (g goNVML) HasSymbol(symbol string) bool {
	ext := g.lib.Extensions()
	return ext == nil || ext.LookupSymbol(symbol) == nil
}

type goDevice struct{ d nvml.Device }

func (g goDevice) GetIndex() (int, Return) {
	v, ret := g.d.GetIndex()
	return v, Return(ret)
}

func (g goDevice) GetUUID() (string, Return) {
	v, ret := g.d.GetUUID()
	return v, Return(ret)
}

func (g goDevice) GetName() (string, Return) {
	v, ret := g.d.GetName()
	return v, Return(ret)
}

func (g goDevice) GetPCIBusID() (string, Return) {
	p, ret := g.d.GetPciInfo()
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b), Return(ret)
}

func (g goDevice) GetMemoryInfo() (MemoryInfo, Return) {
	m, ret := g.d.GetMemoryInfo()
	return MemoryInfo{Total: m.Total, Used: m.Used}, Return(ret)
}

func (g goDevice) GetUtilizationGPU() (uint32, Return) {
	u, ret := g.d.GetUtilizationRates()
	return u.Gpu, Return(ret)
}

func (g goDevice) GetMigMode() (int, Return) {
	cur, _, ret := g.d.GetMigMode()
	return cur, Return(ret)
}

func (g goDevice) GetComputeRunningProcesses() ([]ProcessInfo, Return) {
	ps, ret := g.d.GetComputeRunningProcesses()
	out := make([]ProcessInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, ProcessInfo{PID: p.Pid, UsedGPUMemory: p.UsedGpuMemory})
	}
	return out, Return(ret)
}

func (g goNVML) EventSetCreate() (NVMLEventSet, Return) {
	s, ret := g.lib.EventSetCreate()
	if s == nil {
		return nil, Return(ret)
	}
	return goEventSet{s}, Return(ret)
}

type goEventSet struct{ s nvml.EventSet }

func (g goEventSet) Wait(timeoutMs uint32) (NVMLDevice, uint64, Return) {
	e, ret := g.s.Wait(timeoutMs)
	if e.Device == nil {
		return nil, e.EventData, Return(ret)
	}
	return goDevice{e.Device}, e.EventData, Return(ret)
}

func (g goEventSet) Free() Return { return Return(g.s.Free()) }

func (g goDevice) GetUncorrectedEccErrors(aggregate bool) (uint64, Return) {
	counter := nvml.VOLATILE_ECC
	if aggregate {
		counter = nvml.AGGREGATE_ECC
	}
	v, ret := g.d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, counter)
	return v, Return(ret)
}

func (g goDevice) GetRetiredPagesPendingStatus() (bool, Return) {
	v, ret := g.d.GetRetiredPagesPendingStatus()
	return v == nvml.FEATURE_ENABLED, Return(ret)
}

func (g goDevice) GetRemappedRows() (bool, bool, Return) {
	_, _, pending, failure, ret := g.d.GetRemappedRows()
	return pending, failure, Return(ret)
}

func (g goDevice) GetClocksEventReasons() (uint64, Return) {
	v, ret := g.d.GetCurrentClocksEventReasons()
	return v, Return(ret)
}

func (g goDevice) GetPcieLink(max bool) (int, int, Return) {
	if max {
		gen, ret := g.d.GetMaxPcieLinkGeneration()
		width, _ := g.d.GetMaxPcieLinkWidth()
		return gen, width, Return(ret)
	}
	gen, ret := g.d.GetCurrPcieLinkGeneration()
	width, _ := g.d.GetCurrPcieLinkWidth()
	return gen, width, Return(ret)
}

func (g goDevice) RegisterXIDEvents(set NVMLEventSet) Return {
	gs, ok := set.(goEventSet)
	if !ok {
		return ErrorInvalidArgument
	}
	return Return(g.d.RegisterEvents(EventTypeXIDCritical, gs.s))
}
