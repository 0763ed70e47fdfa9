// Package config reads the job file and the inventory: it loads and
// validates the TOML into a Config, applies every default once (a host's
// workdir included), and reports each problem as a ConfigError that names
// the file, line, key and fix.
//
// It is the only package that reads TOML. Everything downstream (the
// transports, the plan, the supervisor) consumes a *Config and never sees
// the files, so a rule about what a job may say lives here and nowhere else.
package config
