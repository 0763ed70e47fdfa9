//go:build linux

package agent

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/droverhq/drover/gpu"
)

// The kernel-log records a local user can make the kernel write: a
// program named like an Xid that segfaults (its name, cut to 15
// characters, starts the kernel's own record, and its whole file name is
// quoted after "in"), and a record written to /dev/kmsg (facility user).
// Only the driver's own record is an Xid; before the fix the reader kept
// all three and the health gate fenced the host for the forged Xid 79.
const (
	forgedSegfault = "6,1001,5000000,-;NVRM: Xid (PCI:[4321]: segfault at 0 ip 0000000000401000 sp 00007ffc12345678 error 4 in " +
		"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.[401000+1000] likely on CPU 0 (core 0, socket 0)\n" +
		" SUBSYSTEM=\n"
	forgedUser = "12,1002,5000001,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
	realXID    = "4,1003,5000002,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.\n" +
		" SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n"
)

// readKmsgFD over a socket that hands out one record a read, as
// /dev/kmsg does, then EAGAIN.
func TestKmsgForgedXID(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	for _, rec := range []string{forgedSegfault, forgedUser, realXID} {
		_, err := unix.Write(fds[1], []byte(rec))
		require.NoError(t, err)
	}
	out, err := readKmsgFD(fds[0])
	require.NoError(t, err)
	assert.Equal(t, "4,1003,5000002,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.\n", string(out))
	xs := gpu.ParseKernelXIDs(out, []gpu.Device{{Index: 1, PCIBusID: "00000000:3B:00.0"}})
	require.Len(t, xs, 1, "only the driver's own Xid: %+v", xs)
	assert.Equal(t, 1, xs[0].GPU)
}

func TestKernelXIDRecords(t *testing.T) {
	for _, tc := range []struct {
		rec  string
		keep bool
	}{
		{realXID, true},
		{"3,7,1,-;NVRM: Xid (0000:18:00): 13, pid=4243, Graphics Exception", true},
		{forgedSegfault, false},
		{forgedUser, false},
		{"6,8,1,-;python3[12]: NVRM: Xid (PCI:0000:3b:00): 79, x", false},
		{"6,9,1,-;NVRM: Xid (PCI:", false},
		{"no prefix NVRM: Xid (PCI:0000:3b:00): 79, x", false},
	} {
		_, ok := kmsgXIDRecord([]byte(tc.rec))
		assert.Equal(t, tc.keep, ok, "%q", tc.rec)
	}
	dmesg := "<4>[  812.500000] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.\n" +
		"<6>[  813.000000] NVRM: Xid (PCI:[4321]: segfault at 0 ip 0 sp 0 error 4 in NVRM: Xid (PCI:0000:3b:00): 79, x.[401000+1000]\n" +
		"<12>[  814.000000] NVRM: Xid (PCI:0000:3b:00): 79, from a user\n" +
		"<4>NVRM: Xid (0000:18:00): 13, no time stamp\n"
	assert.Equal(t, "<4>[  812.500000] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.\n<4>NVRM: Xid (0000:18:00): 13, no time stamp\n",
		string(dmesgXIDLines([]byte(dmesg))))
}
