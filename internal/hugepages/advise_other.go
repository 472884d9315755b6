//go:build !linux

package hugepages

// supported: elsewhere Floats is make (Enabled is false).
const supported = false

// advise does nothing where the kernel has no transparent huge pages that
// a process can ask for.
func advise([]byte) {}

// release does nothing where advise does nothing.
func release([]byte) {}
