// Package repo reads a model repository in Triton's layout:
//
//	<repository>/<model>/config.yaml         optional
//	<repository>/<model>/<version>/model.onnx version: a positive integer
//
// and decides which versions of a model to serve (its version policy).
// Directories whose names start with "." are skipped, as are non-numeric
// entries inside a model directory.
package repo

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// ModelFile is the file name of a version's model.
const ModelFile = "model.onnx"

// ConfigFile is the file name of a model's optional configuration.
const ConfigFile = "config.yaml"

// validName is what a model name may look like (it appears in URL paths).
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// CheckName reports whether name can name a model.
func CheckName(name string) error {
	if !validName.MatchString(name) || len(name) > 128 {
		return fmt.Errorf("model name %q: want letters, digits, '_', '.' and '-' (starting with a letter or digit), at most 128", name)
	}
	return nil
}

// Model is one model directory (or one --model NAME=path.onnx).
type Model struct {
	Name string
	// Dir is the model's directory ("" for a single file).
	Dir string
	// Config is config.yaml's contents (zero when there is none).
	Config Config
	// Versions are the versions found, in increasing order.
	Versions []Version
}

// Version is one version of a model.
type Version struct {
	Number int64
	// Path is the version's model.onnx.
	Path string
	// Fingerprint changes when any file of the version or the model's
	// config changes (names, sizes, modification times).
	Fingerprint string
}

// String is the version's number as the protocol spells it.
func (v Version) String() string { return strconv.FormatInt(v.Number, 10) }

// Names lists the model directories of a repository, sorted.
func Names(repoDir string) ([]string, error) {
	entries, err := os.ReadDir(repoDir)
	if err != nil {
		return nil, fmt.Errorf("model repository: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !isDir(filepath.Join(repoDir, e.Name())) {
			continue
		}
		names = append(names, e.Name())
	}
	return names, nil
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// Read reads one model directory of a repository.
func Read(repoDir, name string) (*Model, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	dir := filepath.Join(repoDir, name)
	if !isDir(dir) {
		return nil, fmt.Errorf("model %q: no directory %s in the model repository", name, dir)
	}
	m := &Model{Name: name, Dir: dir}
	cfgPrint := ""
	cfgPath := filepath.Join(dir, ConfigFile)
	if data, err := os.ReadFile(cfgPath); err == nil {
		if m.Config, err = ParseConfig(data); err != nil {
			return nil, fmt.Errorf("model %q: %s: %w", name, cfgPath, err)
		}
		sum := sha256.Sum256(data)
		cfgPrint = hex.EncodeToString(sum[:8])
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("model %q: %w", name, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", name, err)
	}
	for _, e := range entries {
		n, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || n <= 0 || strconv.FormatInt(n, 10) != e.Name() || !isDir(filepath.Join(dir, e.Name())) {
			continue
		}
		vdir := filepath.Join(dir, e.Name())
		path := filepath.Join(vdir, ModelFile)
		st, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("model %q version %d: %w", name, n, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("model %q version %d: %s is not a regular file", name, n, path)
		}
		fp, err := fingerprint(vdir, cfgPrint)
		if err != nil {
			return nil, fmt.Errorf("model %q version %d: %w", name, n, err)
		}
		m.Versions = append(m.Versions, Version{Number: n, Path: path, Fingerprint: fp})
	}
	if len(m.Versions) == 0 {
		return nil, fmt.Errorf("model %q: no version directories (want %s/<version>/%s with a positive integer version)", name, dir, ModelFile)
	}
	sort.Slice(m.Versions, func(i, j int) bool { return m.Versions[i].Number < m.Versions[j].Number })
	return m, nil
}

// Single is a model served from one file (--model NAME=path.onnx), as
// version 1.
func Single(name, path string) (*Model, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("model %q: %s is not a regular file (want an .onnx file; a directory is served with --model-repository)", name, path)
	}
	fp := fmt.Sprintf("%s:%d:%d", path, st.Size(), st.ModTime().UnixNano())
	return &Model{Name: name, Versions: []Version{{Number: 1, Path: path, Fingerprint: fp}}}, nil
}

// fingerprint summarizes the regular files of a version directory (their
// names, sizes and modification times; external weights included) and the
// model's config.
func fingerprint(vdir, cfgPrint string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "config %s\n", cfgPrint)
	err := filepath.WalkDir(vdir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d %d\n", path, info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)[:12]), nil
}

// Select returns the versions the policy serves, in increasing order.
func (m *Model) Select(p VersionPolicy) ([]Version, error) {
	switch {
	case p.All:
		return m.Versions, nil
	case len(p.Specific) > 0:
		var out []Version
		for _, n := range p.Specific {
			i := sort.Search(len(m.Versions), func(i int) bool { return m.Versions[i].Number >= n })
			if i == len(m.Versions) || m.Versions[i].Number != n {
				return nil, fmt.Errorf("model %q: version_policy names version %d, which is not in %s", m.Name, n, m.Dir)
			}
			out = append(out, m.Versions[i])
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
		return out, nil
	}
	n := max(p.Latest, 1)
	return m.Versions[max(len(m.Versions)-n, 0):], nil
}
