package regfile

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRefusesNonRegular: a FIFO (which would block open(2) until a writer
// came), a device, a socket and a directory are refused at once.
func TestRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cases := []struct{ path, want string }{
		{fifo, "FIFO"},
		{"/dev/zero", "device"},
		{sock, "socket"},
		{dir, "directory"},
	}
	for _, c := range cases {
		done := make(chan error, 1)
		go func() {
			_, err := ReadFile(c.path, 1<<20)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: err = %v, want one naming a %s", c.path, err, c.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: ReadFile blocked", c.path)
		}
	}
}

func TestReadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(p, 5); err != nil || string(b) != "hello" {
		t.Fatalf("got %q, %v", b, err)
	}
	if _, err := ReadFile(p, 4); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("err = %v, want a size error", err)
	}
	link := p + ".link"
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, _, err := OpenNoFollow(link); err == nil {
		t.Fatal("OpenNoFollow followed a symbolic link")
	}
	if f, _, err := Open(link); err != nil {
		t.Fatalf("Open through a link: %v", err)
	} else {
		f.Close()
	}
}
