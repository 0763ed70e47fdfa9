// Package repo holds tests of the repository itself rather than of a
// package: what is tracked, what the README and docs/ link to.
package repo
