package session

// Tests of attnrun embedded in another Go program, built here as that
// program's authors would build it: a module of its own that requires
// attnrun (through a replace directive pointing at this checkout).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/attnrun/attnrun/internal/procfs"
)

// forgetfulMain is a program that embeds attnrun the way issue 10 saw it
// done: its main opens a session and never calls cpu.ServeIfRequested. It
// also does what any main might, and what must happen once: it appends a
// line to the file named by $EMBED_MAIN_LOG. It opens the model named by
// $EMBED_MODEL (an environment variable, as a configured service would: a
// re-executed copy sees it too), prints how long Open took and the output of one run of the
// session test's tiny model, prints "ready", and closes the session when its
// stdin ends.
const forgetfulMain = `package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/attnrun/attnrun/runtime/session"
	"gorgonia.org/tensor"
)

func main() {
	f, err := os.OpenFile(os.Getenv("EMBED_MAIN_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Fprintf(f, "main ran in pid %d\n", os.Getpid())
	f.Close()

	start := time.Now()
	s, err := session.Open(context.Background(), os.Getenv("EMBED_MODEL"), session.Options{})
	fmt.Printf("open took %d ms\n", time.Since(start).Milliseconds())
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	x := tensor.New(tensor.WithShape(2, 4), tensor.WithBacking([]float32{0.5, -1, 2, 0.25, 1, 2, 3, 4}))
	r := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{10, 20, 30, -1, -2, -3}))
	out, err := s.Run(context.Background(), map[string]*tensor.Dense{"x": x, "r": r})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("y", out["y"].Data())
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	s.Close()
}
`

// TestEmbedderWithoutServeCall is issue 10's trap: a program whose main
// opens a session without calling cpu.ServeIfRequested used to re-execute
// itself, each copy running main and opening a session again (a chain of
// about 1,400 processes), and failed after 20 s. Now the copy serves the CPU
// backend from package cpu's init, before main: Open works within 2 s,
// exactly one backend process exists, main ran once, and nothing is left
// once the program exits.
func TestEmbedderWithoutServeCall(t *testing.T) {
	bin := buildEmbedders(t)["forgetful"]
	model := saveModel(t, tinyModel())
	mainLog := filepath.Join(t.TempDir(), "main.log")
	mark := fmt.Sprintf("ATTNRUN_EMBED_TEST=%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { killMarked(mark) })

	cmd := exec.Command(bin)
	cmd.Env = append(withoutEnv(os.Environ(), ServeBackendEnv), mark, "EMBED_MAIN_LOG="+mainLog, "EMBED_MODEL="+model)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// Read its lines until "ready". A chain of copies would never print it
	// (each copy blocks in its own Open); it is stopped as soon as more
	// than the program and one backend carry the mark.
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var got []string
	limit := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-tick.C:
			if n := len(procfs.WithEnv(mark)); n > 2 {
				t.Fatalf("%d processes carry %s: the program re-executes itself in a chain (output so far %q)", n, mark, got)
			}
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the program ended before \"ready\": %q (stderr: %s)", got, stderr.String())
			}
			got = append(got, l)
			if l == "ready" {
				break wait
			}
		case <-limit:
			t.Fatalf("no \"ready\" within 30 s: %q; processes marked %s: %d", got, mark, len(procfs.WithEnv(mark)))
		}
	}
	m := regexp.MustCompile(`^open took (\d+) ms$`).FindStringSubmatch(got[0])
	if m == nil {
		t.Fatalf("first line %q, want \"open took N ms\"", got[0])
	}
	if ms, _ := strconv.Atoi(m[1]); ms > 2000 {
		t.Errorf("Open took %d ms, want ≤ 2 s", ms)
	}
	x := []float32{0.5, -1, 2, 0.25, 1, 2, 3, 4}
	r := []float32{10, 20, 30, -1, -2, -3}
	if want := fmt.Sprint("y ", tinyWant(x, r)); len(got) < 2 || got[1] != want {
		t.Errorf("output %q, want %q", got, want)
	}

	// One backend process, the program's child; nothing else carries the mark.
	var others []int
	for _, pid := range procfs.WithEnv(mark) {
		if pid != cmd.Process.Pid {
			others = append(others, pid)
		}
	}
	if len(others) != 1 {
		t.Errorf("processes other than the program carrying %s: %v, want exactly 1 (its cpu backend)", mark, others)
	} else if _, ppid := procfs.State(others[0]); ppid != cmd.Process.Pid {
		t.Errorf("backend %d has parent %d, want the program (%d)", others[0], ppid, cmd.Process.Pid)
	}

	stdin.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("program: %v (stderr: %s)", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the program did not exit within 10 s of its stdin ending")
	}
	eventually(t, 3*time.Second, "no process left carrying the mark", func() bool { return len(procfs.WithEnv(mark)) == 0 })
	log, err := os.ReadFile(mainLog)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("main ran in pid %d\n", cmd.Process.Pid); string(log) != want {
		t.Errorf("main's log:\n%s\nwant exactly: %s", log, want)
	}
}

// TestSelfExeNotABackend: when the executable started as the CPU backend
// cannot be one (Options.SelfExe names some other program), Open fails at
// once with one line that says what it must be instead.
func TestSelfExeNotABackend(t *testing.T) {
	start := time.Now()
	_, err := Open(context.Background(), saveModel(t, tinyModel()), Options{SelfExe: "/bin/true", Logf: t.Logf})
	took := time.Since(start)
	want := `launch backend "cpu" (/bin/true): no go-plugin handshake on stdout; the cpu backend runs as a copy of /bin/true (Options.SelfExe), which must be a Go program importing github.com/attnrun/attnrun/runtime/session (or backends/cpu), or set Options.InProcess`
	if err == nil || err.Error() != want {
		t.Errorf("error %v\nwant  %s", err, want)
	}
	if took > 2*time.Second {
		t.Errorf("Open took %v to fail, want ≤ 2 s", took)
	}
}

// killMarked kills every process carrying the environment entry mark (a
// test that failed may have left a chain of them), until none is left.
func killMarked(mark string) {
	for i := 0; i < 100; i++ {
		pids := procfs.WithEnv(mark)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// withoutEnv drops key's entries from env.
func withoutEnv(env []string, key string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(e string) bool { return strings.HasPrefix(e, key+"=") })
}

// embedders are the programs buildEmbedders builds: directory name → main
// package source: forgetfulMain, and the README's program.
func embedders(root string) (map[string]string, error) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return nil, err
	}
	prog, err := readmeProgram(string(readme))
	if err != nil {
		return nil, err
	}
	return map[string]string{"forgetful": forgetfulMain, "readme": prog}, nil
}

// readmeProgram is the first Go code block of the README's "Use from Go"
// section.
func readmeProgram(readme string) (string, error) {
	_, sec, ok := strings.Cut(readme, "\n## Use from Go\n")
	if !ok {
		return "", fmt.Errorf("README.md has no \"## Use from Go\" section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, code, ok := strings.Cut(sec, "\n```go\n")
	if !ok {
		return "", fmt.Errorf("README.md's \"Use from Go\" section has no go code block")
	}
	code, _, ok = strings.Cut(code, "\n```\n")
	if !ok {
		return "", fmt.Errorf("README.md's \"Use from Go\" code block does not end")
	}
	return code + "\n", nil
}

// TestReadmeProgram builds the README's "Use from Go" program as a module of
// its own and runs it from the repository's root: it prints what the README
// says, and leaves no process behind.
func TestReadmeProgram(t *testing.T) {
	bin := buildEmbedders(t)["readme"]
	mark := fmt.Sprintf("ATTNRUN_README_TEST=%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { killMarked(mark) })
	cmd := exec.Command(bin)
	cmd.Dir = "../.."
	cmd.Env = append(withoutEnv(os.Environ(), ServeBackendEnv), mark)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's program: %v\n%s", err, out)
	}
	if string(out) != "y: (1, 4, 32)\n" {
		t.Errorf("the README's program printed %q, want \"y: (1, 4, 32)\\n\"", out)
	}
	eventually(t, 3*time.Second, "no process left carrying the mark", func() bool { return len(procfs.WithEnv(mark)) == 0 })
}

var (
	embeddersOnce  sync.Once
	embeddersBins  map[string]string
	embeddersError error
)

// buildEmbedders builds every program in embedders, once per test binary,
// as one module of its own that requires attnrun through a replace
// directive pointing at this checkout (with attnrun's go.sum, and no
// network: every module comes from the local module cache). It returns the
// executables by name.
func buildEmbedders(t *testing.T) map[string]string {
	t.Helper()
	embeddersOnce.Do(func() { embeddersBins, embeddersError = doBuildEmbedders() })
	if embeddersError != nil {
		t.Fatal(embeddersError)
	}
	return embeddersBins
}

func doBuildEmbedders() (map[string]string, error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return nil, err
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(goMod)
	if goLine == nil {
		return nil, fmt.Errorf("%s/go.mod has no go line", root)
	}
	// The directory outlives any one test (the build is shared): it is
	// removed when the test binary exits (TestMain).
	dir, err := os.MkdirTemp("", "attnrun-embedder-")
	if err != nil {
		return nil, err
	}
	embedderDirs = append(embedderDirs, dir)
	sources, err := embedders(root)
	if err != nil {
		return nil, err
	}
	mod := fmt.Sprintf("module example.com/embedder\n\n%s\n\nrequire github.com/attnrun/attnrun v0.0.0-00010101000000-000000000000\n\nreplace github.com/attnrun/attnrun => %s\n", goLine, root)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		return nil, err
	}
	if err := copyFile(filepath.Join(root, "go.sum"), filepath.Join(dir, "go.sum")); err != nil {
		return nil, err
	}
	bins := map[string]string{}
	for name, src := range sources {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, name, "main.go"), []byte(src), 0o644); err != nil {
			return nil, err
		}
		bins[name] = filepath.Join(dir, "bin", name)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(goTool, "build", "-o", filepath.Join(dir, "bin")+"/", "./...")
	cmd.Dir = dir
	// -mod=mod lets go complete the module's requirements from attnrun's;
	// GOPROXY=off keeps it to the module cache, which building attnrun
	// itself filled.
	cmd.Env = append(withoutEnv(withoutEnv(os.Environ(), "GOFLAGS"), "GOWORK"), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the embedding programs: %v\n%s", err, out)
	}
	return bins, nil
}

// embedderDirs are the build directories to remove when the tests end.
var embedderDirs []string

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
