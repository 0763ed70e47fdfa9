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
	return statID{ctime: st.Ctim.Sec*1e9 + st.Ctim.Nsec, dev: st.Dev, ino: st.Ino}
}
