package push

import (
	"io/fs"
	"syscall"
)

func sysStatID(info fs.FileInfo) statID {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return statID{}
	}
	return statID{ctime: st.Ctimespec.Sec*1e9 + st.Ctimespec.Nsec, dev: uint64(st.Dev), ino: st.Ino}
}
