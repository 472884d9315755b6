//go:build !cgo

package gpu

import "errors"

// cgoEnabled tells Info how the backend was built.
const cgoEnabled = false

// errNoCgo is the unavailability reason of a backend built without cgo: it
// loads CUDA through a cgo dlopen shim.
var errNoCgo = errors.New("built without cgo (CGO_ENABLED=0): the gpu backend loads libcuda, cuBLAS and NVRTC through a cgo dlopen shim; rebuild with CGO_ENABLED=1")

// cudaDevice is never opened in a build without cgo.
type cudaDevice struct{}

func openDevice(deviceConfig) (*cudaDevice, error) { return nil, errNoCgo }

func (d *cudaDevice) do(func() error) error          { return errNoCgo }
func (d *cudaDevice) alloc(int64) (uint64, error)    { return 0, errNoCgo }
func (d *cudaDevice) free(uint64)                    {}
func (d *cudaDevice) htod(uint64, []byte) error      { return errNoCgo }
func (d *cudaDevice) dtoh([]byte, uint64) error      { return errNoCgo }
func (d *cudaDevice) launch(*launch, []uint64) error { return errNoCgo }
func (d *cudaDevice) sgemm(blasCall) error           { return errNoCgo }
func (d *cudaDevice) sync() error                    { return errNoCgo }
func (d *cudaDevice) memInfo() (int64, int64, error) { return 0, 0, errNoCgo }
func (d *cudaDevice) details() map[string]string     { return nil }
