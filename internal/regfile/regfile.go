// Package regfile opens files that attnrun reads as data (models, external
// weights, input tensors) so that opening can never block: the path must
// name a regular file, checked before it is opened, and it is opened
// non-blocking and checked again on the open descriptor. A FIFO, a device
// or a socket is refused at once instead of hanging in open(2) or read(2).
package regfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Open opens path for reading after checking that it names a regular file
// (following symbolic links). It returns the open file and its info.
func Open(path string) (*os.File, fs.FileInfo, error) {
	return open(path, 0)
}

// OpenNoFollow is Open for a path whose symbolic links the caller has
// already resolved: a link in its last element is refused.
func OpenNoFollow(path string) (*os.File, fs.FileInfo, error) {
	return open(path, syscall.O_NOFOLLOW)
}

func open(path string, flags int) (*os.File, fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if err := Check(path, st); err != nil {
		return nil, nil, err
	}
	// O_NONBLOCK: should path have become a FIFO since the Stat, open
	// still returns at once, and the Fstat below refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|flags, 0)
	if err != nil {
		return nil, nil, err
	}
	st, err = f.Stat()
	if err == nil {
		err = Check(path, st)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// Check returns an error naming what path is when st is not a regular file.
func Check(path string, st fs.FileInfo) error {
	m := st.Mode()
	if m.IsRegular() {
		return nil
	}
	what := "not a regular file"
	switch {
	case m.IsDir():
		what = "a directory, not a regular file"
	case m&fs.ModeNamedPipe != 0:
		what = "a FIFO (named pipe), not a regular file"
	case m&fs.ModeSocket != 0:
		what = "a socket, not a regular file"
	case m&fs.ModeDevice != 0:
		what = "a device, not a regular file"
	case m&fs.ModeSymlink != 0:
		what = "a symbolic link"
	}
	return fmt.Errorf("%s is %s", path, what)
}

// ReadFile reads the regular file at path whole, refusing one larger than
// limit bytes before reading it.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d this file may have", path, st.Size(), limit)
	}
	// The size may change while reading: read at most limit+1 bytes.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s grew past %d bytes while being read", path, limit)
	}
	return data, nil
}
