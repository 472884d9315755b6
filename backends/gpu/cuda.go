//go:build cgo

package gpu

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <stddef.h>

// Trampolines: each calls a function pointer found with dlsym. Nothing from
// CUDA is needed at build time; the types are spelled as the ABI has them
// (CUdevice is int, handles are pointers, CUdeviceptr is 64 bits, enums int).
typedef unsigned long long u64;

static void* c_dlopen(const char* name) { return dlopen(name, RTLD_NOW | RTLD_GLOBAL); }
static const char* c_dlerror(void) { const char* e = dlerror(); return e ? e : "unknown dlopen error"; }

static int c_int_u(void* f, unsigned a) { return ((int (*)(unsigned))f)(a); }
static int c_int_pi(void* f, int* a) { return ((int (*)(int*))f)(a); }
static int c_int_pi_i(void* f, int* a, int b) { return ((int (*)(int*, int))f)(a, b); }
static int c_int_pi_i_i(void* f, int* a, int b, int c) { return ((int (*)(int*, int, int))f)(a, b, c); }
static int c_int_pc_i_i(void* f, char* a, int b, int c) { return ((int (*)(char*, int, int))f)(a, b, c); }
static int c_int_psz_i(void* f, size_t* a, int b) { return ((int (*)(size_t*, int))f)(a, b); }
static int c_int_psz_psz(void* f, size_t* a, size_t* b) { return ((int (*)(size_t*, size_t*))f)(a, b); }
static int c_int_pp_i(void* f, void** a, int b) { return ((int (*)(void**, int))f)(a, b); }
static int c_int_p(void* f, void* a) { return ((int (*)(void*))f)(a); }
static int c_int_pp(void* f, void** a) { return ((int (*)(void**))f)(a); }
static int c_int_v(void* f) { return ((int (*)(void))f)(); }
static int c_memalloc(void* f, u64* p, size_t n) { return ((int (*)(u64*, size_t))f)(p, n); }
static int c_memfree(void* f, u64 p) { return ((int (*)(u64))f)(p); }
static int c_htod(void* f, u64 dst, const void* src, size_t n) { return ((int (*)(u64, const void*, size_t))f)(dst, src, n); }
static int c_dtoh(void* f, void* dst, u64 src, size_t n) { return ((int (*)(void*, u64, size_t))f)(dst, src, n); }
static int c_module_load(void* f, void** mod, const void* image) { return ((int (*)(void**, const void*))f)(mod, image); }
static int c_module_fn(void* f, void** fn, void* mod, const char* name) {
	return ((int (*)(void**, void*, const char*))f)(fn, mod, name);
}
static int c_error_name(void* f, int err, const char** s) { return ((int (*)(int, const char**))f)(err, s); }
static int c_launch(void* f, void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                    unsigned shmem, void* params) {
	void* args[1] = {params};  // every kernel takes one struct by value
	return ((int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**))f)(
	    fn, gx, gy, gz, bx, by, bz, shmem, (void*)0, args, (void**)0);
}

static int c_blas_create(void* f, void** h) { return ((int (*)(void**))f)(h); }
static int c_blas_math(void* f, void* h, int mode) { return ((int (*)(void*, int))f)(h, mode); }
static int c_blas_version(void* f, void* h, int* v) { return ((int (*)(void*, int*))f)(h, v); }
// cublasSgemmStridedBatched has 18 arguments (more than purego takes).
static int c_sgemm(void* f, void* h, int ta, int tb, int m, int n, int k, float alpha, u64 A, int lda, long long sA,
                   u64 B, int ldb, long long sB, float beta, u64 C, int ldc, long long sC, int batch) {
	return ((int (*)(void*, int, int, int, int, int, const float*, const float*, int, long long, const float*, int,
	                 long long, const float*, float*, int, long long, int))f)(
	    h, ta, tb, m, n, k, &alpha, (const float*)A, lda, sA, (const float*)B, ldb, sB, &beta, (float*)C, ldc, sC, batch);
}

static int c_nvrtc_create(void* f, void** prog, const char* src, const char* name) {
	return ((int (*)(void**, const char*, const char*, int, const char* const*, const char* const*))f)(prog, src, name, 0,
	                                                                                                    0, 0);
}
static int c_nvrtc_compile(void* f, void* prog, int n, char** opts) { return ((int (*)(void*, int, char**))f)(prog, n, opts); }
static int c_nvrtc_size(void* f, void* prog, size_t* n) { return ((int (*)(void*, size_t*))f)(prog, n); }
static int c_nvrtc_get(void* f, void* prog, char* out) { return ((int (*)(void*, char*))f)(prog, out); }
static int c_nvrtc_version(void* f, int* major, int* minor) { return ((int (*)(int*, int*))f)(major, minor); }
static const char* c_nvrtc_error(void* f, int r) { return ((const char* (*)(int))f)(r); }
*/
import "C"

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"unsafe"
)

// cgoEnabled tells Info how the backend was built.
const cgoEnabled = true

// CUDA enum values used here (stable across CUDA 11 and 12).
const (
	cuDevAttrCCMajor = 75
	cuDevAttrCCMinor = 76
	cublasOpN        = 0
	cublasOpT        = 1
	cublasDefault    = 0 // CUBLAS_DEFAULT_MATH: no TF32
	cublasTF32       = 3 // CUBLAS_TF32_TENSOR_OP_MATH
)

// cudaDevice is one GPU with the kernels loaded. Every CUDA call runs on
// one OS thread (the context is current there): use do.
type cudaDevice struct {
	calls chan func()

	cu, blas map[string]unsafe.Pointer
	handle   unsafe.Pointer
	module   unsafe.Pointer
	funcs    map[string]unsafe.Pointer
	info     map[string]string
}

var cudaSyms = []string{
	"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName", "cuDeviceGetAttribute",
	"cuDeviceTotalMem_v2", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuCtxSynchronize", "cuMemAlloc_v2",
	"cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemGetInfo_v2", "cuModuleLoadData", "cuModuleGetFunction",
	"cuLaunchKernel", "cuGetErrorName",
}

var blasSyms = []string{"cublasCreate_v2", "cublasSetMathMode", "cublasGetVersion_v2", "cublasSgemmStridedBatched"}

var rtcSyms = []string{
	"nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog", "nvrtcGetPTXSize",
	"nvrtcGetPTX", "nvrtcDestroyProgram", "nvrtcVersion", "nvrtcGetErrorString",
}

// Library names tried in order (the first name is the one reported).
var (
	cudaLibs   = []string{"libcuda.so.1", "libcuda.so"}
	cublasLibs = []string{"libcublas.so.12", "libcublas.so.11", "libcublas.so"}
	nvrtcLibs  = []string{"libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so.11.1", "libnvrtc.so.11.0", "libnvrtc.so"}
)

// openLib dlopens the first loadable name (in cfg.libDirs first, then the
// loader's search path) and resolves syms.
func openLib(names, syms, dirs []string) (map[string]unsafe.Pointer, string, error) {
	var lib unsafe.Pointer
	var firstErr, used string
	for _, name := range names {
		var cands []string
		for _, d := range dirs {
			cands = append(cands, strings.TrimRight(d, "/")+"/"+name)
		}
		cands = append(cands, name)
		for _, c := range cands {
			cs := C.CString(c)
			lib = C.c_dlopen(cs)
			C.free(unsafe.Pointer(cs))
			if lib != nil {
				used = c
				break
			}
			if firstErr == "" {
				firstErr = C.GoString(C.c_dlerror())
			}
		}
		if lib != nil {
			break
		}
	}
	if lib == nil {
		return nil, "", fmt.Errorf("%s not found: %s", names[0], firstErr)
	}
	out := make(map[string]unsafe.Pointer, len(syms))
	for _, s := range syms {
		cs := C.CString(s)
		p := C.dlsym(lib, cs)
		C.free(unsafe.Pointer(cs))
		if p == nil {
			return nil, "", fmt.Errorf("%s: symbol %s not found", used, s)
		}
		out[s] = p
	}
	return out, used, nil
}

// openDevice loads the driver, picks the device, compiles the kernels with
// NVRTC and creates the cuBLAS handle, all on a dedicated OS thread that
// then serves do.
func openDevice(cfg deviceConfig) (*cudaDevice, error) {
	d := &cudaDevice{calls: make(chan func()), funcs: map[string]unsafe.Pointer{}, info: map[string]string{}}
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the context stays current on this thread
		if err := d.init(cfg); err != nil {
			ready <- err
			return // the thread ends locked: it is discarded
		}
		ready <- nil
		for f := range d.calls {
			f()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return d, nil
}

// do runs f on the device thread and returns its error.
func (d *cudaDevice) do(f func() error) error {
	done := make(chan error, 1)
	d.calls <- func() { done <- f() }
	return <-done
}

// check turns a CUresult into an error naming the call.
func (d *cudaDevice) check(what string, r C.int) error {
	if r == 0 {
		return nil
	}
	var s *C.char
	name := "CUDA error " + strconv.Itoa(int(r))
	if C.c_error_name(d.cu["cuGetErrorName"], r, &s) == 0 && s != nil {
		name = C.GoString(s)
	}
	return fmt.Errorf("%s failed: %s", what, name)
}

func (d *cudaDevice) init(cfg deviceConfig) error {
	var err error
	var path string
	if d.cu, path, err = openLib(cudaLibs, cudaSyms, cfg.libDirs); err != nil {
		return err
	}
	d.info["libcuda"] = path
	if err := d.check("cuInit", C.c_int_u(d.cu["cuInit"], 0)); err != nil {
		return err
	}
	var ver, count C.int
	if err := d.check("cuDriverGetVersion", C.c_int_pi(d.cu["cuDriverGetVersion"], &ver)); err != nil {
		return err
	}
	d.info["cuda_driver"] = fmt.Sprintf("%d.%d", ver/1000, ver%1000/10)
	if err := d.check("cuDeviceGetCount", C.c_int_pi(d.cu["cuDeviceGetCount"], &count)); err != nil {
		return err
	}
	if int(count) <= cfg.ordinal {
		return fmt.Errorf("no CUDA device %d (the driver sees %d)", cfg.ordinal, count)
	}
	var dev, major, minor C.int
	if err := d.check("cuDeviceGet", C.c_int_pi_i(d.cu["cuDeviceGet"], &dev, C.int(cfg.ordinal))); err != nil {
		return err
	}
	name := make([]byte, 256)
	if err := d.check("cuDeviceGetName", C.c_int_pc_i_i(d.cu["cuDeviceGetName"], (*C.char)(unsafe.Pointer(&name[0])), 255, dev)); err != nil {
		return err
	}
	d.info["device"] = strings.TrimRight(string(name), "\x00")
	if err := d.check("cuDeviceGetAttribute", C.c_int_pi_i_i(d.cu["cuDeviceGetAttribute"], &major, cuDevAttrCCMajor, dev)); err != nil {
		return err
	}
	if err := d.check("cuDeviceGetAttribute", C.c_int_pi_i_i(d.cu["cuDeviceGetAttribute"], &minor, cuDevAttrCCMinor, dev)); err != nil {
		return err
	}
	d.info["compute_capability"] = fmt.Sprintf("%d.%d", major, minor)
	var total C.size_t
	if err := d.check("cuDeviceTotalMem", C.c_int_psz_i(d.cu["cuDeviceTotalMem_v2"], &total, dev)); err != nil {
		return err
	}
	d.info["device_memory_bytes"] = strconv.FormatUint(uint64(total), 10)
	var ctx unsafe.Pointer
	if err := d.check("cuDevicePrimaryCtxRetain", C.c_int_pp_i(d.cu["cuDevicePrimaryCtxRetain"], &ctx, dev)); err != nil {
		return err
	}
	if err := d.check("cuCtxSetCurrent", C.c_int_p(d.cu["cuCtxSetCurrent"], ctx)); err != nil {
		return err
	}
	rtc, err := loadNVRTC(cfg.libDirs)
	if err != nil {
		return err
	}
	d.info["libnvrtc"], d.info["nvrtc"] = rtc.path, rtc.version
	ptx, arch, err := rtc.compileKernels(int(major), int(minor))
	if err != nil {
		return err
	}
	d.info["kernels"] = fmt.Sprintf("%d kernels, NVRTC %s for %s", len(kernelNames), rtc.version, arch)
	cptx := C.CString(ptx)
	defer C.free(unsafe.Pointer(cptx))
	if err := d.check("cuModuleLoadData (loading the NVRTC-compiled PTX)", C.c_module_load(d.cu["cuModuleLoadData"], &d.module, unsafe.Pointer(cptx))); err != nil {
		return err
	}
	for _, k := range kernelNames {
		ck := C.CString(k)
		var fn unsafe.Pointer
		r := C.c_module_fn(d.cu["cuModuleGetFunction"], &fn, d.module, ck)
		C.free(unsafe.Pointer(ck))
		if err := d.check("cuModuleGetFunction("+k+")", r); err != nil {
			return err
		}
		d.funcs[k] = fn
	}
	if d.blas, path, err = openLib(cublasLibs, blasSyms, cfg.libDirs); err != nil {
		return err
	}
	d.info["libcublas"] = path
	if r := C.c_blas_create(d.blas["cublasCreate_v2"], &d.handle); r != 0 {
		return fmt.Errorf("cublasCreate failed: cuBLAS status %d", r)
	}
	var bv C.int
	if C.c_blas_version(d.blas["cublasGetVersion_v2"], d.handle, &bv) == 0 {
		d.info["cublas"] = strconv.Itoa(int(bv))
	}
	mode, tf := C.int(cublasDefault), "off (CUBLAS_DEFAULT_MATH: full fp32)"
	if cfg.tf32 {
		mode, tf = cublasTF32, "on (CUBLAS_TF32_TENSOR_OP_MATH)"
	}
	if r := C.c_blas_math(d.blas["cublasSetMathMode"], d.handle, mode); r != 0 {
		return fmt.Errorf("cublasSetMathMode failed: cuBLAS status %d", r)
	}
	d.info["tf32"] = tf
	return nil
}

// nvrtc is a loaded NVRTC library. It needs no GPU: it compiles CUDA C++
// to PTX on the CPU.
type nvrtc struct {
	fn      map[string]unsafe.Pointer
	path    string
	version string
}

// loadNVRTC dlopens libnvrtc (dirs first).
func loadNVRTC(dirs []string) (*nvrtc, error) {
	fn, path, err := openLib(nvrtcLibs, rtcSyms, dirs)
	if err != nil {
		return nil, err
	}
	r := &nvrtc{fn: fn, path: path}
	var vmaj, vmin C.int
	if C.c_nvrtc_version(fn["nvrtcVersion"], &vmaj, &vmin) == 0 {
		r.version = fmt.Sprintf("%d.%d", vmaj, vmin)
	}
	return r, nil
}

func (r *nvrtc) check(what string, res C.int) error {
	if res == 0 {
		return nil
	}
	return fmt.Errorf("%s failed: %s", what, C.GoString(C.c_nvrtc_error(r.fn["nvrtcGetErrorString"], res)))
}

// compileKernels compiles kernelSource for the device's architecture, or,
// when this NVRTC does not know it (an NVRTC older than the GPU), for an
// older one whose PTX the driver JIT-compiles forward. It returns the PTX
// and the architecture used.
func (r *nvrtc) compileKernels(major, minor int) (string, string, error) {
	archs := []string{fmt.Sprintf("compute_%d%d", major, minor), "compute_80", "compute_70", "compute_60", "compute_52"}
	var firstErr error
	for _, arch := range archs {
		ptx, err := r.compile(kernelSource, arch)
		if err == nil {
			return ptx, arch, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return "", "", firstErr
}

// compile runs NVRTC on src for one virtual architecture.
func (r *nvrtc) compile(source, arch string) (string, error) {
	src, name := C.CString(source), C.CString("attnrun_kernels.cu")
	defer C.free(unsafe.Pointer(src))
	defer C.free(unsafe.Pointer(name))
	var prog unsafe.Pointer
	if err := r.check("nvrtcCreateProgram", C.c_nvrtc_create(r.fn["nvrtcCreateProgram"], &prog, src, name)); err != nil {
		return "", err
	}
	defer C.c_int_pp(r.fn["nvrtcDestroyProgram"], &prog)
	opts := []string{"--gpu-architecture=" + arch, "--std=c++14", "-default-device"}
	copts := (*[16]*C.char)(C.malloc(C.size_t(16 * unsafe.Sizeof((*C.char)(nil)))))
	defer C.free(unsafe.Pointer(copts))
	for i, o := range opts {
		copts[i] = C.CString(o)
		defer C.free(unsafe.Pointer(copts[i]))
	}
	res := C.c_nvrtc_compile(r.fn["nvrtcCompileProgram"], prog, C.int(len(opts)), &copts[0])
	if res != 0 {
		var n C.size_t
		log := ""
		if C.c_nvrtc_size(r.fn["nvrtcGetProgramLogSize"], prog, &n) == 0 && n > 1 {
			buf := make([]byte, n)
			C.c_nvrtc_get(r.fn["nvrtcGetProgramLog"], prog, (*C.char)(unsafe.Pointer(&buf[0])))
			log = strings.TrimRight(string(buf), "\x00\n")
		}
		return "", fmt.Errorf("%w (options %v): %s", r.check("nvrtcCompileProgram", res), opts, log)
	}
	var n C.size_t
	if err := r.check("nvrtcGetPTXSize", C.c_nvrtc_size(r.fn["nvrtcGetPTXSize"], prog, &n)); err != nil {
		return "", err
	}
	buf := make([]byte, n)
	if err := r.check("nvrtcGetPTX", C.c_nvrtc_get(r.fn["nvrtcGetPTX"], prog, (*C.char)(unsafe.Pointer(&buf[0])))); err != nil {
		return "", err
	}
	return strings.TrimRight(string(buf), "\x00"), nil
}

// ---- operations (call them inside do) ----

func (d *cudaDevice) alloc(n int64) (uint64, error) {
	var p C.u64
	if err := d.check(fmt.Sprintf("cuMemAlloc(%d bytes)", n), C.c_memalloc(d.cu["cuMemAlloc_v2"], &p, C.size_t(max(n, 1)))); err != nil {
		return 0, err
	}
	return uint64(p), nil
}

func (d *cudaDevice) free(p uint64) {
	if p != 0 {
		C.c_memfree(d.cu["cuMemFree_v2"], C.u64(p))
	}
}

func (d *cudaDevice) htod(dst uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.check("cuMemcpyHtoD", C.c_htod(d.cu["cuMemcpyHtoD_v2"], C.u64(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

func (d *cudaDevice) dtoh(dst []byte, src uint64) error {
	if len(dst) == 0 {
		return nil
	}
	return d.check("cuMemcpyDtoH", C.c_dtoh(d.cu["cuMemcpyDtoH_v2"], unsafe.Pointer(&dst[0]), C.u64(src), C.size_t(len(dst))))
}

func (d *cudaDevice) launch(k *launch, params []uint64) error {
	fn := d.funcs[k.kernel]
	if fn == nil {
		return fmt.Errorf("kernel %s is not loaded", k.kernel)
	}
	if len(params) == 0 {
		return fmt.Errorf("kernel %s: no parameters", k.kernel)
	}
	r := C.c_launch(d.cu["cuLaunchKernel"], fn, C.uint(k.grid[0]), C.uint(k.grid[1]), C.uint(k.grid[2]),
		C.uint(k.block[0]), C.uint(k.block[1]), C.uint(k.block[2]), C.uint(k.shmem), unsafe.Pointer(&params[0]))
	return d.check("cuLaunchKernel("+k.kernel+")", r)
}

// sgemm makes one cublasSgemmStridedBatched call (see gemmCall.columnMajor
// for the row-major mapping).
func (d *cudaDevice) sgemm(g blasCall) error {
	opA, opB := C.int(cublasOpN), C.int(cublasOpN)
	if g.transA {
		opA = cublasOpT
	}
	if g.transB {
		opB = cublasOpT
	}
	r := C.c_sgemm(d.blas["cublasSgemmStridedBatched"], d.handle, opA, opB, C.int(g.m), C.int(g.n), C.int(g.k),
		C.float(g.alpha), C.u64(g.a), C.int(g.lda), C.longlong(g.strideA), C.u64(g.b), C.int(g.ldb), C.longlong(g.strideB),
		C.float(g.beta), C.u64(g.c), C.int(g.ldc), C.longlong(g.strideC), C.int(g.batch))
	if r != 0 {
		return fmt.Errorf("cublasSgemmStridedBatched(m=%d n=%d k=%d batch=%d) failed: cuBLAS status %d", g.m, g.n, g.k, g.batch, r)
	}
	return nil
}

func (d *cudaDevice) sync() error {
	return d.check("cuCtxSynchronize", C.c_int_v(d.cu["cuCtxSynchronize"]))
}

func (d *cudaDevice) memInfo() (free, total int64, err error) {
	var f, t C.size_t
	if err := d.check("cuMemGetInfo", C.c_int_psz_psz(d.cu["cuMemGetInfo_v2"], &f, &t)); err != nil {
		return 0, 0, err
	}
	return int64(f), int64(t), nil
}

func (d *cudaDevice) details() map[string]string { return d.info }
