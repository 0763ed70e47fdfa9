package gpu

import (
	"fmt"
	"strconv"
	"time"
)

// EventTypeXIDCritical is nvml.h's nvmlEventTypeXidCriticalError.
const EventTypeXIDCritical = 0x8

// health reads one GPU's health counters. A counter the GPU does not
// have (ERROR_NOT_SUPPORTED) stays nil; lost is true when NVML answered
// ERROR_GPU_IS_LOST to any of them.
func health(h NVMLDevice) (hl Health, lost bool) {
	seen := func(ret Return) bool {
		if ret == ErrorGPUIsLost {
			lost = true
		}
		return ret == Success
	}
	if v, ret := safe1(func() (uint64, Return) { return h.GetUncorrectedEccErrors(false) }); seen(ret) {
		hl.ECCVolatile = &v
	}
	if v, ret := safe1(func() (uint64, Return) { return h.GetUncorrectedEccErrors(true) }); seen(ret) {
		hl.ECCAggregate = &v
	}
	if v, ret := safe1(h.GetRetiredPagesPendingStatus); seen(ret) {
		hl.RetiredPending = &v
	}
	type remap struct{ pending, failure bool }
	if v, ret := safe1(func() (remap, Return) { p, f, r := h.GetRemappedRows(); return remap{p, f}, r }); seen(ret) {
		hl.RemapPending, hl.RemapFailure = &v.pending, &v.failure
	}
	if v, ret := safe1(h.GetClocksEventReasons); seen(ret) {
		hl.Throttle = &v
	}
	type link struct{ gen, width int }
	for _, max := range []bool{false, true} {
		v, ret := safe1(func() (link, Return) { g, w, r := h.GetPcieLink(max); return link{g, w}, r })
		if !seen(ret) {
			continue
		}
		gen, width := &hl.PCIeGen, &hl.PCIeWidth
		if max {
			gen, width = &hl.PCIeGenMax, &hl.PCIeWidthMax
		}
		if v.gen > 0 {
			*gen = &v.gen
		}
		if v.width > 0 {
			*width = &v.width
		}
	}
	return hl, lost
}

// maxXIDsPerWait bounds what one wait collects: a GPU that floods Xids
// has been judged by the first of them.
const maxXIDsPerWait = 64

// listenXIDs registers every GPU in handles for Xid events and collects
// those that arrive within p.XIDWait. NVML delivers an event only to sets
// that existed when it happened, so a caller that polls calls this back
// to back; the time between two calls is the gap it can miss (the kernel
// log, read beside it, covers that). It sets rep.XIDSource, or
// rep.XIDReason when the events cannot be had.
func (p LocalProber) listenXIDs(lib NVML, handles map[int]NVMLDevice, rep *HostReport) {
	set, ret := safe1(lib.EventSetCreate)
	if ret != Success || set == nil {
		rep.XIDReason = "nvml: create an event set: " + ret.Error()
		return
	}
	defer safe0(set.Free)
	registered := 0
	for _, h := range handles {
		if safe0(func() Return { return h.RegisterXIDEvents(set) }) == Success {
			registered++
		}
	}
	if registered == 0 {
		rep.XIDReason = "nvml: no GPU takes Xid event registrations"
		return
	}
	rep.XIDSource = "nvml"
	deadline := p.now().Add(p.XIDWait)
	for {
		left := deadline.Sub(p.now())
		if left < 0 {
			left = 0
		}
		type ev struct {
			dev NVMLDevice
			xid uint64
		}
		e, ret := safe1(func() (ev, Return) { d, x, r := set.Wait(uint32(left.Milliseconds())); return ev{d, x}, r })
		if ret != Success {
			return // a timeout, or a failure that another wait would repeat
		}
		x := XID{GPU: -1, Code: int(e.xid), Text: "NVML Xid event"}
		if e.dev != nil {
			if i, ret := safe1(e.dev.GetIndex); ret == Success {
				x.GPU = i
			}
		}
		x.Key = fmt.Sprintf("nvml %s gpu %d xid %d", strconv.FormatInt(p.now().UnixNano(), 10), x.GPU, x.Code)
		rep.XIDs = append(rep.XIDs, x)
		if len(rep.XIDs) >= maxXIDsPerWait {
			return
		}
	}
}

func (p LocalProber) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}
