package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/plugins/backendpb"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestWireRoundTrip(t *testing.T) {
	cases := []*ir.Tensor{
		ir.FromSlice([]int{2, 3}, []float32{1, -2, 3.5, 4, 5, 6}),
		ir.FromSlice([]int{2}, []float64{1e300, -0.5}),
		{DType: ir.Float16, Shape: []int{2}, Data: []uint16{ir.Float32ToFloat16(1.5), ir.Float32ToFloat16(-2)}},
		{DType: ir.BFloat16, Shape: []int{2}, Data: []uint16{0x3fc0, 0xc000}}, // 1.5, -2
		ir.FromSlice([]int{3}, []int64{-1, 0, 1 << 40}),
		ir.FromSlice([]int{2}, []int32{-7, 7}),
		ir.FromSlice([]int{2}, []int16{-7, 7}),
		ir.FromSlice([]int{2}, []int8{-7, 7}),
		ir.FromSlice([]int{2}, []uint8{0, 255}),
		ir.FromSlice([]int{2}, []uint16{0, 65535}),
		ir.FromSlice([]int{2}, []uint32{0, 1 << 31}),
		ir.FromSlice([]int{2}, []uint64{0, 1 << 63}),
		ir.FromSlice([]int{4}, []bool{true, false, false, true}),
		ir.FromSlice([]int{2}, []string{"", "héllo"}),
		ir.Scalar(float32(3)),
		ir.FromSlice([]int{0, 4}, []float32{}),
		ir.FromSlice([]int{2, 0}, []string{}),
	}
	for _, in := range cases {
		t.Run(in.DType.String()+"["+ir.ShapeString(in.Shape)+"]", func(t *testing.T) {
			w, err := toWire(in)
			if err != nil {
				t.Fatal(err)
			}
			if in.DType != ir.String && int64(len(w.Raw)) != in.Bytes() {
				t.Errorf("raw has %d bytes, want %d", len(w.Raw), in.Bytes())
			}
			out, err := fromWire(w, 0)
			if err != nil {
				t.Fatal(err)
			}
			if out.DType != in.DType || len(out.Shape) != len(in.Shape) || !reflect.DeepEqual(out.Data, in.Data) {
				t.Errorf("got %v %v %v, want %v %v %v", out.DType, out.Shape, out.Data, in.DType, in.Shape, in.Data)
			}
			if len(in.Shape) > 0 && !reflect.DeepEqual(out.Shape, in.Shape) {
				t.Errorf("shape %v, want %v", out.Shape, in.Shape)
			}
		})
	}
}

func TestWireLittleEndian(t *testing.T) {
	w, err := toWire(ir.FromSlice([]int{2}, []int32{1, -2}))
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff}
	if !reflect.DeepEqual(w.Raw, want) {
		t.Errorf("raw %v, want %v", w.Raw, want)
	}
}

func TestWireUnalignedAndBools(t *testing.T) {
	buf := make([]byte, 9)
	copy(buf[1:], []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}) // 1.0, 2.0
	out, err := fromWire(&backendpb.Tensor{Dtype: int32(ir.Float), Dims: []int64{2}, Raw: buf[1:]}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Float32s(); !reflect.DeepEqual(got, []float32{1, 2}) {
		t.Errorf("unaligned floats decoded as %v", got)
	}
	b, err := fromWire(&backendpb.Tensor{Dtype: int32(ir.Bool), Dims: []int64{3}, Raw: []byte{0, 7, 1}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Bools(); !reflect.DeepEqual(got, []bool{false, true, true}) {
		t.Errorf("bools decoded as %v", got)
	}
}

func TestWireRejects(t *testing.T) {
	cases := []struct {
		name string
		w    *backendpb.Tensor
		max  int64
		want string
	}{
		{"nil", nil, 0, "missing tensor"},
		{"dtype", &backendpb.Tensor{Dtype: 99}, 0, "unsupported dtype dtype(99)"},
		{"bfloat16 short", &backendpb.Tensor{Dtype: int32(ir.BFloat16)}, 0, "bfloat16 dims [] need 2 bytes, got 0"},
		{"negative dim", &backendpb.Tensor{Dtype: 1, Dims: []int64{2, -1}}, 0, "invalid dims [2 -1]"},
		{"overflow", &backendpb.Tensor{Dtype: 1, Dims: []int64{1 << 40, 1 << 40}}, 0, "dims [1099511627776 1099511627776] overflow"},
		{"short raw", &backendpb.Tensor{Dtype: 1, Dims: []int64{2, 2}, Raw: make([]byte, 12)}, 0, "float32 dims [2 2] need 16 bytes, got 12"},
		{"huge claim", &backendpb.Tensor{Dtype: 1, Dims: []int64{1 << 61}}, 0, "float32 dims [2305843009213693952] need -9223372036854775808 bytes, got 0"},
		{"strings", &backendpb.Tensor{Dtype: int32(ir.String), Dims: []int64{3}, Strings: [][]byte{[]byte("a")}}, 0, "dims [3] need 3 strings, got 1"},
		{"limit", &backendpb.Tensor{Dtype: 1, Dims: []int64{4}, Raw: make([]byte, 16)}, 8, "float32 dims [4] is 16 bytes, over the 8-byte limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := fromWire(c.w, c.max)
			if err == nil || err.Error() != c.want {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestStatusPage(t *testing.T) {
	f, page, err := newHostStatusPage()
	if err != nil {
		t.Fatal(err)
	}
	defer page.close()
	defer f.Close()
	if _, _, running, _ := page.read(); running {
		t.Fatal("a fresh page says a node is running")
	}
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(StatusFDEnv, strconv.Itoa(fd))
	w, err := StatusWriterFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		run        bool
		part       PartitionID
		node       int
		wantSeqInc uint64
	}{
		{true, 3, 0, 2}, {true, 3, 17, 2}, {false, 3, 0, 2}, {true, 1 << 40, 5, 2},
	}
	var lastSeq uint64
	for _, st := range steps {
		if st.run {
			w.Running(st.part, st.node)
		} else {
			w.Idle(st.part)
		}
		part, node, running, seq := page.read()
		if part != st.part || running != st.run || (st.run && node != st.node) || seq != lastSeq+st.wantSeqInc {
			t.Errorf("after %+v the page reads partition %d node %d running %v seq %d", st, part, node, running, seq)
		}
		lastSeq = seq
	}
	// A fused step's label reaches the host; a plain node clears it; a
	// label longer than the page is cut.
	const label = `fused node "/a/FusedAttention" (com.attnrun:FusedAttention, replacing "/MatMul", "/Softmax", "/MatMul_1")`
	w.RunningStep(3, 7, label)
	if part, node, running, _ := page.read(); part != 3 || node != 7 || !running || page.label() != label {
		t.Errorf("page: partition %d node %d running %v label %q", part, node, running, page.label())
	}
	w.Running(3, 8)
	if page.label() != "" {
		t.Errorf("label %q left after a plain node", page.label())
	}
	w.RunningStep(3, 9, strings.Repeat("x", 2*statusPageSize))
	if n := len(page.label()); n != statusPageSize-offLabel {
		t.Errorf("label of %d bytes, want it cut to %d", n, statusPageSize-offLabel)
	}
	var nilWriter *StatusWriter
	nilWriter.Running(1, 1) // no page: ignored
	nilWriter.Idle(1)

	t.Setenv(StatusFDEnv, "x")
	if _, err := StatusWriterFromEnv(); err == nil || err.Error() != `ATTNRUN_STATUS_FD="x" is not a file descriptor` {
		t.Errorf("bad fd error %v", err)
	}
	t.Setenv(StatusFDEnv, "")
	if w, err := StatusWriterFromEnv(); w != nil || err != nil {
		t.Errorf("no page: got %v, %v", w, err)
	}
}

// TestStatusPageInProcess: an in-process backend's page is written and
// read in one process, the writer's label while the reader reads it (run
// with -race).
func TestStatusPageInProcess(t *testing.T) {
	page := &statusPage{mem: make([]byte, statusPageSize)}
	copy(page.mem, statusMagic)
	w := &StatusWriter{page: page}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2000; i++ {
			w.RunningStep(1, i, fmt.Sprintf("fused step %d", i))
		}
	}()
	for {
		select {
		case <-done:
			if st := page.state(); st.Label != "fused step 1999" || st.Node != 1999 {
				t.Errorf("state %+v", st)
			}
			return
		default:
		}
		if st := page.state(); st.Running && !strings.HasPrefix(st.Label, "fused step ") {
			t.Fatalf("torn label %q", st.Label)
		}
	}
}

func TestDiscover(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("attnrun-backend-zeta", 0o755)
	write("attnrun-backend-alpha", 0o600)
	write("attnrun-backend-", 0o755)
	write("other-tool", 0o755)
	if err := os.Mkdir(filepath.Join(dir, "attnrun-backend-dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "missing"), filepath.Join(dir, "attnrun-backend-dangling")); err != nil {
		t.Fatal(err)
	}
	got, err := Discover(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, c := range got {
		lines = append(lines, c.Name+": "+strings.ReplaceAll(c.Reason, dir, "DIR"))
	}
	want := []string{
		"alpha: not executable (mode -rw-------)",
		"dangling: broken symlink: lstat DIR/missing: no such file or directory",
		"dir: not a regular file",
		"zeta: ",
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("Discover:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if got[3].Path != filepath.Join(dir, "attnrun-backend-zeta") {
		t.Errorf("path %q", got[3].Path)
	}
	if c, err := Discover("", ""); c != nil || err != nil {
		t.Errorf("Discover(\"\") = %v, %v", c, err)
	}
	if _, err := Discover(filepath.Join(dir, "nope"), ""); err == nil || !strings.HasPrefix(err.Error(), "plugin dir: open ") {
		t.Errorf("missing dir error %v", err)
	}
}

func TestDiedErrorMessage(t *testing.T) {
	exit2 := exec.Command("sh", "-c", "exit 2").Run()
	var ee *exec.ExitError
	if !errors.As(exit2, &ee) {
		t.Fatalf("sh exit 2 gave %v", exit2)
	}
	cases := []struct {
		e    DiedError
		want string
	}{
		{DiedError{Backend: "cpu", Pid: 1234, Where: Where{Running: true, Partition: 0, NodeIndex: 4, Node: NodeRef{Name: "/Softmax", OpType: "Softmax"}}, ExitErr: ee},
			`backend "cpu" (pid 1234) died while running node "/Softmax" (Softmax) of partition 0: exit status 2`},
		{DiedError{Backend: "gpu", Pid: 7, Where: Where{Running: true, Partition: 3, PartitionLabel: "1", Node: NodeRef{OpType: "FusedAttention", Domain: "com.attnrun"}}, ExitErr: ee, Stderr: "panic: boom"},
			`backend "gpu" (pid 7) died while running node "FusedAttention" (com.attnrun:FusedAttention) of partition 1: exit status 2 (backend stderr: panic: boom)`},
		{DiedError{Backend: "cpu", Pid: 9, Where: Where{Running: true, Partition: 2, NodeIndex: 5}, ExitErr: ee},
			`backend "cpu" (pid 9) died while running node #5 of partition 2: exit status 2`},
		{DiedError{Backend: "cpu", Pid: 9, Where: Where{Running: true, Partition: 2, NodeIndex: 5, Node: NodeRef{Name: "/MatMul", OpType: "MatMul"}}, ExitErr: ee, Killed: "it did not answer a health check within 3s"},
			`backend "cpu" (pid 9) was killed while running node "/MatMul" (MatMul) of partition 2: it did not answer a health check within 3s`},
		{DiedError{Backend: "cpu", Pid: 9},
			`backend "cpu" (pid 9) died while no node was running: exit status 0`},
	}
	for _, c := range cases {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}

func TestInterruptedAndStuckErrors(t *testing.T) {
	cases := []struct {
		err  error
		want string
		is   error
	}{
		{&InterruptedError{Backend: "cpu", Pid: 5, Op: "run", Where: Where{Running: true, Partition: 1, PartitionLabel: "0", Node: NodeRef{Name: "/MatMul", OpType: "MatMul"}}, Err: context.DeadlineExceeded},
			`backend "cpu" (pid 5): run interrupted while running node "/MatMul" (MatMul) of partition 0: context deadline exceeded`, context.DeadlineExceeded},
		{&InterruptedError{Backend: "cpu", Pid: 5, Op: "run", Queued: true, Err: context.Canceled},
			`backend "cpu" (pid 5): run interrupted while waiting for an earlier run on this backend: context canceled`, context.Canceled},
		{&InterruptedError{Backend: "gpu", Pid: 6, Op: "compile", Err: context.Canceled},
			`backend "gpu" (pid 6): compile interrupted: context canceled`, context.Canceled},
		{&StuckError{Backend: "gpu", Pid: 6, Op: "info", Limit: InfoTimeout},
			`backend "gpu" (pid 6) did not answer info within 5s and was killed`, context.DeadlineExceeded},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
		if !errors.Is(c.err, c.is) {
			t.Errorf("%s: errors.Is(%v) is false", c.want, c.is)
		}
	}
}

// lateContext is a context with a deadline whose Done closes only when the
// test closes it, as a context.WithDeadline's closes only when its timer's
// goroutine runs, which on a loaded machine can be well after the
// deadline.
type lateContext struct {
	context.Context
	deadline time.Time
	done     chan struct{}
}

func (c *lateContext) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *lateContext) Done() <-chan struct{}       { return c.done }
func (c *lateContext) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestCheckLateDeadline: a Run the backend ended for the caller's deadline
// (gRPC's DeadlineExceeded) is an *InterruptedError matching
// context.DeadlineExceeded, at once, even when the caller's context has not
// ended yet although its deadline has passed (its timer's goroutine has not
// run); it was returned as a bare gRPC error when the context had not ended
// 10 ms past the deadline (seen once in a soak). Here the context never
// ends by itself.
func TestCheckLateDeadline(t *testing.T) {
	p := &Process{name: "cpu", pid: 7, run: &procRunner{done: make(chan struct{})}}
	ctx := &lateContext{Context: context.Background(), deadline: time.Now().Add(-50 * time.Millisecond), done: make(chan struct{})}
	rpcErr := fmt.Errorf("run: %w", status.Error(codes.DeadlineExceeded, "stream terminated by RST_STREAM with error code: CANCEL"))
	err := p.check(ctx, rpcErr)
	var ie *InterruptedError
	if !errors.As(err, &ie) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("check = %v (%T), want an *InterruptedError matching context.DeadlineExceeded", err, err)
	}
}

func TestLaunchErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Launch(ctx, LaunchSpec{}); err == nil || err.Error() != "launch: no command" {
		t.Errorf("no command: %v", err)
	}
	dir := t.TempDir()
	missing := filepath.Join(dir, "attnrun-backend-missing")
	_, err := Launch(ctx, LaunchSpec{Cmd: exec.Command(missing)})
	want := `launch backend "missing" (` + missing + `): fork/exec ` + missing + `: no such file or directory`
	if err == nil || err.Error() != want {
		t.Errorf("missing executable:\n got %v\nwant %s", err, want)
	}
	quitter := filepath.Join(dir, "attnrun-backend-quitter")
	if err := os.WriteFile(quitter, []byte("#!/bin/sh\necho 'cannot start: no device' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = Launch(ctx, LaunchSpec{Cmd: exec.Command(quitter), Logger: NewLogger(&strings.Builder{})})
	want = `launch backend "quitter" (` + quitter + `): no go-plugin handshake on stdout (exit status 1) (backend stderr: cannot start: no device)`
	if err == nil || err.Error() != want {
		t.Errorf("quitting executable:\n got %v\nwant %s", err, want)
	}
}

func TestWatchParent(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	gone := make(chan struct{})
	if err := watchParent(strconv.Itoa(fd), func() { close(gone) }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-gone:
		t.Fatal("parent reported gone while the pipe is open")
	case <-time.After(20 * time.Millisecond):
	}
	w.Close() // the host exits
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("closing the pipe was not noticed")
	}
	if err := watchParent("", nil); err != nil {
		t.Errorf("no pipe: %v", err)
	}
	if err := watchParent("-3", nil); err == nil || err.Error() != `ATTNRUN_PARENT_FD="-3" is not a file descriptor` {
		t.Errorf("bad fd: %v", err)
	}
}
