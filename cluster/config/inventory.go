package config

import (
	"fmt"
	"path/filepath"
	"strings"
)

// inventoryReader decides where the hosts come from when the job file
// does not hold them: the inventory file it names, or the Slurm
// allocation (inventory = "slurm", or no hosts at all), and reports a job
// file that also holds hosts or [ssh] of its own.
type inventoryReader struct{ *walker }

// namedInventory loads the inventory file the job file names (inventory =
// "fleet.toml"), relative to the job file, and reports a job file that
// also holds hosts or [ssh] of its own.
func (w inventoryReader) namedInventory(top tbl, jobPath, jobAbs string, read readFunc) (*walker, tbl, string) {
	doc := top.m
	inv, ok := w.str(top, "inventory")
	if !ok {
		return nil, tbl{}, ""
	}
	if _, has := doc["host"]; has {
		w.add("inventory", "the job file has both inventory and [[host]] tables",
			fmt.Sprintf("keep the hosts in one place: move the [[host]] tables into %s, or remove the inventory line", inv))
	}
	if _, has := doc["ssh"]; has {
		w.add("ssh", "[ssh] must be in the inventory file, next to the hosts it applies to",
			fmt.Sprintf("move the [ssh] table into %s", inv))
	}
	if strings.TrimSpace(inv) == "" {
		w.add("inventory", "must name a file", `write inventory = "fleet.toml" (relative to the job file), or remove the line`)
		return nil, tbl{}, ""
	}
	shown, abs := inv, inv
	if !filepath.IsAbs(inv) {
		shown = filepath.Join(filepath.Dir(jobPath), inv)
		abs = filepath.Join(filepath.Dir(jobAbs), inv)
	}
	hw, htop := loadInventory(shown, abs, read, w.errs, func(msg string) *ConfigError {
		return &ConfigError{File: jobPath, Line: w.lines.lineOf("inventory"), Key: "inventory", Msg: msg,
			Fix: "check the path; a relative inventory path is relative to the job file's directory"}
	})
	return hw, htop, abs
}

// loadInventory reads and parses an inventory file; readErr builds the
// error for a file that cannot be read, placed where the path was given.
func loadInventory(show, abs string, read readFunc, errs *ConfigErrors, readErr func(string) *ConfigError) (*walker, tbl) {
	data, err := read(abs)
	if err != nil {
		*errs = append(*errs, readErr(fmt.Sprintf("read inventory %s: %v", show, err)))
		return nil, tbl{}
	}
	doc, lines, perr := parseTOML(show, data)
	if perr != nil {
		*errs = append(*errs, perr)
		return nil, tbl{}
	}
	w := &walker{file: show, lines: lines, errs: errs, top: doc}
	top := tbl{m: doc, schema: inventorySchema}
	w.unknown(top)
	return w, top
}
