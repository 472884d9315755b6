package repo

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var tinyModel = filepath.Join("..", "..", "models", "s003_self_attention", "model.onnx")

// layout makes a repository with the given files; "x/1/model.onnx" gets a
// copy of a real model, other files the given text.
func layout(t *testing.T, files map[string]string) string {
	t.Helper()
	model, err := os.ReadFile(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data := []byte(text)
		if filepath.Base(name) == ModelFile {
			data = model
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func versions(vs []Version) []int64 {
	var out []int64
	for _, v := range vs {
		out = append(out, v.Number)
	}
	return out
}

func TestRead(t *testing.T) {
	dir := layout(t, map[string]string{
		"mha/1/model.onnx": "", "mha/3/model.onnx": "", "mha/12/model.onnx": "",
		"mha/notes/readme": "x", "mha/01/model.onnx": "", "mha/0/model.onnx": "",
		"mha/config.yaml":      "instances: 2\nworker_spin: 50us\ndynamic_batching: {max_batch_size: 8, max_queue_delay: 500us}\n",
		".hidden/1/model.onnx": "", "tiny/2/model.onnx": "", "stray.txt": "x",
	})
	names, err := Names(dir)
	if err != nil || !reflect.DeepEqual(names, []string{"mha", "tiny"}) {
		t.Fatalf("Names: %v %v", names, err)
	}
	m, err := Read(dir, "mha")
	if err != nil {
		t.Fatal(err)
	}
	if got := versions(m.Versions); !reflect.DeepEqual(got, []int64{1, 3, 12}) {
		t.Fatalf("versions %v (0 and 01 are not versions; notes is not numeric)", got)
	}
	if m.Config.Instances != 2 || m.Config.DynamicBatching.MaxBatchSize != 8 || time.Duration(m.Config.DynamicBatching.MaxQueueDelay) != 500*time.Microsecond ||
		m.Config.WorkerSpin == nil || time.Duration(*m.Config.WorkerSpin) != 50*time.Microsecond {
		t.Fatalf("config %+v %+v", m.Config, m.Config.DynamicBatching)
	}
	for policy, want := range map[string][]int64{"latest": {12}, "latest:2": {3, 12}, "latest:9": {1, 3, 12}, "all": {1, 3, 12}} {
		p, err := ParseVersionPolicy(policy)
		if err != nil {
			t.Fatal(err)
		}
		vs, err := m.Select(p)
		if err != nil || !reflect.DeepEqual(versions(vs), want) {
			t.Fatalf("%s: %v %v, want %v", policy, versions(vs), err, want)
		}
		if p.String() != policy && !(policy == "latest" && p.String() == "latest") {
			t.Fatalf("%s prints as %s", policy, p)
		}
	}
	vs, err := m.Select(VersionPolicy{Specific: []int64{12, 1}})
	if err != nil || !reflect.DeepEqual(versions(vs), []int64{1, 12}) {
		t.Fatalf("specific: %v %v", versions(vs), err)
	}
	if _, err := m.Select(VersionPolicy{Specific: []int64{2}}); err == nil || !strings.Contains(err.Error(), "names version 2") {
		t.Fatalf("missing specific version: %v", err)
	}
}

func TestReadErrors(t *testing.T) {
	dir := layout(t, map[string]string{
		"empty/readme":          "x",
		"nomodel/1/weights":     "x",
		"badcfg/1/model.onnx":   "",
		"badcfg/config.yaml":    "instance: 2\n",
		"baddur/1/model.onnx":   "",
		"baddur/config.yaml":    "dynamic_batching: {max_batch_size: 4, max_queue_delay: soon}\n",
		"badpol/1/model.onnx":   "",
		"badpol/config.yaml":    "version_policy: {latest: 2, all: true}\n",
		"negative/1/model.onnx": "",
		"negative/config.yaml":  "instances: -1\n",
		"negspin/1/model.onnx":  "",
		"negspin/config.yaml":   "worker_spin: -1ms\n",
		"badnest/1/model.onnx":  "",
		"badnest/config.yaml":   "instances: 2\ndynamic_batching: {max_batch: 8}\n",
		"badtype/1/model.onnx":  "",
		"badtype/config.yaml":   "instances: two\n",
		"badyaml/1/model.onnx":  "",
		"badyaml/config.yaml":   "instances: 2\n  threads: 1\n",
	})
	for name, want := range map[string]string{
		"empty":    "no version directories",
		"nomodel":  "model.onnx: no such file",
		"badcfg":   `config.yaml: line 1: unknown field "instance" (known there: backend, instances, threads, worker_spin, max_queue, version_policy, dynamic_batching)`,
		"badnest":  `config.yaml: line 2: unknown field "max_batch" (known there: max_batch_size, max_queue_delay)`,
		"badtype":  "config.yaml: line 1: cannot unmarshal !!str `two` into int",
		"badyaml":  "config.yaml: line 2: mapping values are not allowed",
		"baddur":   `"soon" is not a duration`,
		"badpol":   "exactly one of latest, all, specific",
		"negative": "instances must be ≥ 1",
		"negspin":  `"-1ms" is not a duration ≥ 0`,
		"missing":  "no directory",
		"bad/name": "model name",
	} {
		if _, err := Read(dir, name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, want)
		}
	}
	for _, bad := range []string{"", "latest:0", "latest:x", "newest", "latest:2x"} {
		if _, err := ParseVersionPolicy(bad); err == nil {
			t.Errorf("ParseVersionPolicy(%q) accepted", bad)
		}
	}
}

func TestFingerprintChanges(t *testing.T) {
	dir := layout(t, map[string]string{"m/1/model.onnx": ""})
	before, err := Read(dir, "m")
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Read(dir, "m")
	if again.Versions[0].Fingerprint != before.Versions[0].Fingerprint {
		t.Fatal("fingerprint changed without a change")
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, "m", "1", ModelFile), later, later); err != nil {
		t.Fatal(err)
	}
	touched, _ := Read(dir, "m")
	if touched.Versions[0].Fingerprint == before.Versions[0].Fingerprint {
		t.Fatal("fingerprint ignores a new modification time")
	}
	os.WriteFile(filepath.Join(dir, "m", ConfigFile), []byte("threads: 1\n"), 0o644)
	configured, _ := Read(dir, "m")
	if configured.Versions[0].Fingerprint == touched.Versions[0].Fingerprint {
		t.Fatal("fingerprint ignores the config")
	}
}

func TestSingle(t *testing.T) {
	m, err := Single("tiny", tinyModel)
	if err != nil || len(m.Versions) != 1 || m.Versions[0].Number != 1 || m.Versions[0].String() != "1" {
		t.Fatalf("%+v %v", m, err)
	}
	if _, err := Single("tiny", filepath.Dir(tinyModel)); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("directory: %v", err)
	}
	if _, err := Single("a b", tinyModel); err == nil {
		t.Fatal("accepted a name with a space")
	}
}
