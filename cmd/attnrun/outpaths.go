package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// makeOutputDir creates the directory an output flag (--out,
// --attention-maps) names, before the model runs, so that a path that
// cannot be written fails at once, naming the flag, instead of after a run
// whose results would then be lost.
func makeOutputDir(flag, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%s %s: %w", flag, dir, err)
	}
	return writableDir(flag, dir, dir)
}

// checkOutputFile checks, before the model runs, that the file an output
// flag (--trace, --profile) names can be created: its directory exists and
// is writable.
func checkOutputFile(flag, path string) error {
	return writableDir(flag, path, filepath.Dir(path))
}

// writableDir reports, naming flag and its value, why dir cannot take new
// files: it is missing, not a directory, or not writable by this process.
func writableDir(flag, value, dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("%s %s: %w", flag, value, err)
	case !fi.IsDir():
		return fmt.Errorf("%s %s: %s is not a directory", flag, value, dir)
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("%s %s: directory %s is not writable: %w", flag, value, dir, err)
	}
	return nil
}
