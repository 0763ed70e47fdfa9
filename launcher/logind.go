package launcher

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// LogindGuard decides how `drover run -d` keeps its background supervisor
// alive past the user's logout, on a system (root is "/" but in tests)
// whose systemd-logind kills a logged-out user's processes
// (KillUserProcesses=yes) unless the user lingers: nothing to do (nil)
// where it does not, else the command to wrap the supervisor in (its own
// systemd scope), or an error naming the fix where no scope can be had.
func LogindGuard(root, user string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(root, "run/systemd/system")); err != nil {
		return nil, nil // not booted with systemd
	}
	if !killUserProcesses(root) {
		return nil, nil
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/systemd/linger", user)); err == nil {
		return nil, nil
	}
	scope := []string{"systemd-run", "--user", "--scope", "--quiet", "--collect"}
	if root == "/" {
		if exec.Command(scope[0], append(scope[1:], "true")...).Run() == nil {
			return scope, nil
		}
	}
	return nil, fmt.Errorf("systemd-logind on this machine kills a user's processes at logout (KillUserProcesses=yes) "+
		"and no user scope can be had (systemd-run --user --scope failed): the background supervisor would die with your session; "+
		"run `loginctl enable-linger %s` once, then drover run -d again", user)
}

// killUserProcesses reads logind's KillUserProcesses as logind would:
// logind.conf, then the drop-ins in name order, the last setting winning
// (default no).
func killUserProcesses(root string) bool {
	files := []string{filepath.Join(root, "etc/systemd/logind.conf")}
	var dropins []string
	for _, d := range []string{"usr/lib/systemd/logind.conf.d", "run/systemd/logind.conf.d", "etc/systemd/logind.conf.d"} {
		m, _ := filepath.Glob(filepath.Join(root, d, "*.conf"))
		dropins = append(dropins, m...)
	}
	sort.Slice(dropins, func(i, j int) bool { return filepath.Base(dropins[i]) < filepath.Base(dropins[j]) })
	kill := false
	for _, f := range append(files, dropins...) {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
			if ok && strings.TrimSpace(k) == "KillUserProcesses" {
				v = strings.ToLower(strings.TrimSpace(v))
				kill = v == "yes" || v == "true" || v == "1" || v == "on"
			}
		}
		fh.Close()
	}
	return kill
}
