// A fake libnvidia-ml.so.1 for tests: the functions package dlnvml calls,
// compiled against NVIDIA's own nvml.h (go-nvml ships it), so that the
// struct layouts dlnvml assumes are checked by a C compiler. Two GPUs:
// 0 idle, MIG not supported; 1 busy (two processes, one whose memory NVML
// cannot tell), MIG enabled. FAKE_NVML_INIT=<code> makes nvmlInit_v2 fail.
// FAKE_NVML_HEALTH=<what> makes GPU 1 unhealthy: ecc, aggregate, retired,
// remap-failure, remap-pending, throttle, pcie, xid (an Xid 79 event),
// lost (every health call answers GPU_IS_LOST); GPU 0 is always sound,
// with the answers a real H200 gives (no page retirement: NOT_SUPPORTED).
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvml.h"

_Static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "busId offset");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t size");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t size");
_Static_assert(offsetof(nvmlProcessInfo_t, usedGpuMemory) == 8, "usedGpuMemory offset");
_Static_assert(offsetof(nvmlMemory_t, used) == 16, "nvmlMemory_t.used offset");
_Static_assert(sizeof(nvmlEventData_t) == 32 && offsetof(nvmlEventData_t, eventData) == 16, "nvmlEventData_t layout");
_Static_assert(sizeof(nvmlEnableState_t) == 4, "nvmlEnableState_t size");
_Static_assert(nvmlClocksThrottleReasonHwThermalSlowdown == 0x40 && nvmlClocksThrottleReasonHwPowerBrakeSlowdown == 0x80 && nvmlEventTypeXidCriticalError == 0x8, "bits gpu/health.go names");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40 && offsetof(nvmlMemory_v2_t, used) == 32, "nvmlMemory_v2_t layout");

struct fake { unsigned int index; };
static struct fake devs[2] = {{0}, {1}};
static int inited;

// go-nvml's copy of nvml.h wraps the handle in a one-pointer struct (NVIDIA's
// is the bare pointer); either way it is one pointer in one register.
static unsigned int idx(nvmlDevice_t d) { return ((struct fake *)d.handle)->index; }

nvmlReturn_t nvmlInit_v2(void) {
	const char *e = getenv("FAKE_NVML_INIT");
	if (e && *e) return (nvmlReturn_t)atoi(e);
	inited = 1;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) { inited = 0; return NVML_SUCCESS; }

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int n) {
	snprintf(v, n, "550.54.15");
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12040; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
	if (!inited) return NVML_ERROR_UNINITIALIZED;
	*n = 2;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
	if (i >= 2) return NVML_ERROR_INVALID_ARGUMENT;
	d->handle = (struct nvmlDevice_st *)&devs[i];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i) { *i = idx(d); return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *s, unsigned int n) {
	snprintf(s, n, "GPU-fa6e0000-0000-4000-8000-00000000000%u", idx(d));
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *s, unsigned int n) {
	snprintf(s, n, "NVIDIA H100 80GB HBM3");
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
	memset(p, 0, sizeof *p);
	p->bus = 0x18 + idx(d);
	snprintf(p->busIdLegacy, sizeof p->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, 0, p->bus, 0);
	snprintf(p->busId, sizeof p->busId, NVML_DEVICE_PCI_BUS_ID_FMT, 0, p->bus, 0);
	return NVML_SUCCESS;
}

// As a real driver since R510: the first call's used counts in what the
// driver reserves (here 611 MiB, as an idle H200 under driver 580 shows
// 615 MiB used there and 0 in nvidia-smi); _v2 reports it apart.
#define RESERVED (611ULL << 20)
static unsigned long long used(nvmlDevice_t d) { return idx(d) ? 30004ULL << 20 : 4ULL << 20; }

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	m->total = 81559ULL << 20;
	m->used = used(d) + RESERVED;
	m->free = m->total - m->used;
	return NVML_SUCCESS;
}

// FAKE_NVML_MEMORY_V2=missing answers as a driver before R510 would (no
// such function), =mismatch as one that knows another struct version.
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
	const char *e = getenv("FAKE_NVML_MEMORY_V2");
	if (e && strcmp(e, "missing") == 0) return NVML_ERROR_FUNCTION_NOT_FOUND;
	if ((e && strcmp(e, "mismatch") == 0) || m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	m->total = 81559ULL << 20;
	m->reserved = RESERVED;
	m->used = used(d);
	m->free = m->total - m->used - m->reserved;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
	u->gpu = idx(d) ? 97 : 0;
	u->memory = 11;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *cur, unsigned int *pending) {
	if (idx(d) == 0) return NVML_ERROR_NOT_SUPPORTED;
	*cur = NVML_DEVICE_MIG_ENABLE;
	*pending = NVML_DEVICE_MIG_ENABLE;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *infos) {
	unsigned int have = idx(d) ? 2 : 0;
	if (*n < have) {
		*n = have;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	*n = have;
	for (unsigned int i = 0; i < have; i++) {
		infos[i].pid = 4242 + i;
		infos[i].usedGpuMemory = i == 0 ? 30000ULL << 20 : NVML_VALUE_NOT_AVAILABLE;
		infos[i].gpuInstanceId = 0xFFFFFFFF;
		infos[i].computeInstanceId = 0xFFFFFFFF;
	}
	return NVML_SUCCESS;
}

static int sick(nvmlDevice_t d, const char *what) {
	const char *e = getenv("FAKE_NVML_HEALTH");
	return idx(d) == 1 && e && strcmp(e, what) == 0;
}

#define LOST_CHECK(d) do { if (sick(d, "lost")) return NVML_ERROR_GPU_IS_LOST; } while (0)

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, nvmlMemoryErrorType_t t, nvmlEccCounterType_t c, unsigned long long *n) {
	LOST_CHECK(d);
	if (t != NVML_MEMORY_ERROR_TYPE_UNCORRECTED) return NVML_ERROR_INVALID_ARGUMENT;
	*n = 0;
	if (c == NVML_VOLATILE_ECC && sick(d, "ecc")) *n = 1;
	if (c == NVML_AGGREGATE_ECC && (sick(d, "ecc") || sick(d, "aggregate"))) *n = 3;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, nvmlEnableState_t *p) {
	LOST_CHECK(d);
	if (!sick(d, "retired")) return NVML_ERROR_NOT_SUPPORTED; // as on an H200
	*p = NVML_FEATURE_ENABLED;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corr, unsigned int *unc, unsigned int *pending, unsigned int *failure) {
	LOST_CHECK(d);
	*corr = 0;
	*unc = sick(d, "remap-failure") || sick(d, "remap-pending");
	*pending = sick(d, "remap-pending");
	*failure = sick(d, "remap-failure");
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) {
	LOST_CHECK(d);
	*r = sick(d, "throttle") ? (nvmlClocksThrottleReasonHwThermalSlowdown | nvmlClocksEventReasonSwPowerCap) : 0;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *g) { LOST_CHECK(d); *g = 5; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *g) { LOST_CHECK(d); *g = 5; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *w) { LOST_CHECK(d); *w = sick(d, "pcie") ? 8 : 16; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *w) { LOST_CHECK(d); *w = 16; return NVML_SUCCESS; }

// One event set; FAKE_NVML_HEALTH=xid queues one Xid 79 on GPU 1 for the
// first wait after GPU 1 registered.
static int set_made, xid_queued;
static struct nvmlEventSet_st *the_set = (struct nvmlEventSet_st *)&set_made;

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *s) {
	set_made = 1;
	*(struct nvmlEventSet_st **)s = the_set;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t s) {
	if (!set_made || !(types & nvmlEventTypeXidCriticalError)) return NVML_ERROR_INVALID_ARGUMENT;
	if (sick(d, "xid")) xid_queued = 1;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t s, nvmlEventData_t *e, unsigned int timeoutms) {
	if (!set_made) return NVML_ERROR_INVALID_ARGUMENT;
	if (!xid_queued) return NVML_ERROR_TIMEOUT;
	xid_queued = 0;
	memset(e, 0, sizeof *e);
	e->device.handle = (struct nvmlDevice_st *)&devs[1];
	e->eventType = nvmlEventTypeXidCriticalError;
	e->eventData = 79;
	e->gpuInstanceId = 0xFFFFFFFF;
	e->computeInstanceId = 0xFFFFFFFF;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t s) { set_made = 0; return NVML_SUCCESS; }
