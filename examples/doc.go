// Package examples holds the end-to-end tests of the example jobs: each
// runs a real job (PyTorch over gloo where python3-torch is installed) on
// the test fleet through the drover binary, as a user would.
package examples
