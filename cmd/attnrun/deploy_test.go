package main

// deploy/ cannot be run here (no Docker engine, no Kubernetes), so this
// test checks what binds its files to the binary: the runtime's and the
// image's arguments parse with the real `serve` command, and the ports and
// paths they name are the ones the manifests, the image and the protocol
// use.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

var deployDir = filepath.Join(repoRoot, "deploy")

// yamlDocs reads every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var d map[string]any
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, d)
	}
	return docs
}

// at walks a YAML tree by keys (strings) and indexes (ints).
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a mapping at %q", path, k)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("%v: no item %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

// serveFlagsFor parses serve's arguments (after "serve") with the real
// command and returns it.
func serveFlagsFor(t *testing.T, args []string) *cobra.Command {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("arguments %v do not start with serve", args)
	}
	root := newRootCmd(&globalFlags{})
	cmd, rest, err := root.Find(args)
	if err != nil || cmd.Name() != "serve" {
		t.Fatalf("%v: %v", args, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("serve does not take %v: %v", rest, err)
	}
	if len(cmd.Flags().Args()) != 0 {
		t.Fatalf("serve takes no positional arguments, got %v", cmd.Flags().Args())
	}
	return cmd
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return p
}

func flag(t *testing.T, cmd *cobra.Command, name string) string {
	t.Helper()
	f := cmd.Flags().Lookup(name)
	if f == nil || !f.Changed {
		t.Fatalf("--%s is not set", name)
	}
	return f.Value.String()
}

func str(v any) string {
	b, _ := json.Marshal(v)
	return strings.Trim(string(b), `"`)
}

func TestKServeRuntimeBindsToServe(t *testing.T) {
	docs := yamlDocs(t, filepath.Join(deployDir, "kserve", "clusterservingruntime.yaml"))
	if len(docs) != 1 {
		t.Fatalf("%d documents", len(docs))
	}
	rt := docs[0]
	if at(t, rt, "apiVersion") != "serving.kserve.io/v1alpha1" || at(t, rt, "kind") != "ClusterServingRuntime" {
		t.Fatalf("not a ClusterServingRuntime: %v %v", at(t, rt, "apiVersion"), at(t, rt, "kind"))
	}
	formats := at(t, rt, "spec", "supportedModelFormats").([]any)
	if at(t, formats, 0, "name") != "onnx" || at(t, formats, 0, "autoSelect") != true {
		t.Fatalf("model formats %v", formats)
	}
	protocols := at(t, rt, "spec", "protocolVersions").([]any)
	if !slices.Contains(protocols, any("v2")) || !slices.Contains(protocols, any("grpc-v2")) {
		t.Fatalf("protocol versions %v", protocols)
	}
	c := at(t, rt, "spec", "containers", 0)
	if at(t, c, "name") != "kserve-container" {
		t.Fatalf("container %v: KServe needs kserve-container", at(t, c, "name"))
	}
	var args []string
	for _, a := range at(t, c, "args").([]any) {
		args = append(args, a.(string))
	}
	cmd := serveFlagsFor(t, args)
	if got := flag(t, cmd, "model-repository"); got != "/mnt/models" {
		t.Fatalf("--model-repository %s: KServe's storage initializer mounts models at /mnt/models", got)
	}
	if got, want := port(t, flag(t, cmd, "http")), str(at(t, c, "ports", 0, "containerPort")); got != want {
		t.Fatalf("--http port %s, container port %s", got, want)
	}
	if got, want := port(t, flag(t, cmd, "metrics")), str(at(t, rt, "spec", "annotations", "prometheus.kserve.io/port")); got != want {
		t.Fatalf("--metrics port %s, prometheus.kserve.io/port %s", got, want)
	}
	if at(t, rt, "spec", "annotations", "prometheus.kserve.io/path") != "/metrics" {
		t.Fatal("metrics path is not /metrics")
	}
	if at(t, c, "readinessProbe", "httpGet", "path") != "/v2/health/ready" || at(t, c, "livenessProbe", "httpGet", "path") != "/v2/health/live" {
		t.Fatal("probes must use the protocol's health endpoints")
	}
	if at(t, c, "securityContext", "runAsNonRoot") != true {
		t.Fatal("the runtime must run as non-root")
	}
	// The InferenceServices name this runtime, and the gRPC one the port
	// serve's --grpc listens on.
	grpcPort := port(t, flag(t, cmd, "grpc"))
	isvcs := yamlDocs(t, filepath.Join(deployDir, "kserve", "inferenceservice.yaml"))
	if len(isvcs) != 2 {
		t.Fatalf("%d InferenceServices, want an HTTP and a gRPC one", len(isvcs))
	}
	for _, isvc := range isvcs {
		m := at(t, isvc, "spec", "predictor", "model")
		if at(t, isvc, "kind") != "InferenceService" || at(t, m, "runtime") != at(t, rt, "metadata", "name") || at(t, m, "modelFormat", "name") != "onnx" {
			t.Fatalf("InferenceService %v does not bind to the runtime", at(t, isvc, "metadata", "name"))
		}
		proto := at(t, m, "protocolVersion")
		if !slices.Contains(protocols, proto) {
			t.Fatalf("protocolVersion %v is not one the runtime supports", proto)
		}
		if proto == "grpc-v2" {
			if at(t, m, "ports", 0, "name") != "h2c" || str(at(t, m, "ports", 0, "containerPort")) != grpcPort {
				t.Fatalf("the gRPC InferenceService must expose h2c on --grpc's port %s", grpcPort)
			}
		}
		if at(t, isvc, "spec", "predictor", "scaleMetric") != "concurrency" {
			t.Fatal("the example scales on concurrency")
		}
	}
}

func TestDockerfile(t *testing.T) {
	f, err := os.Open(filepath.Join(deployDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type stage struct{ from, name string }
	var stages []stage
	var user, entrypoint, cmdLine, expose string
	var copied []string // COPY --from=<build stage> destinations
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(word) {
		case "FROM":
			fields := strings.Fields(rest)
			st := stage{from: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			}
			stages = append(stages, st)
			user = "" // USER is per stage
		case "USER":
			user = rest
		case "ENTRYPOINT":
			entrypoint = rest
		case "CMD":
			cmdLine = rest
		case "EXPOSE":
			expose = rest
		case "COPY":
			if strings.HasPrefix(rest, "--from=") {
				fields := strings.Fields(rest)
				copied = append(copied, fields[len(fields)-1])
			}
		}
	}
	if len(stages) < 2 || stages[0].name == "" {
		t.Fatalf("stages %v: want a named build stage and a final stage", stages)
	}
	final := stages[len(stages)-1]
	if !strings.Contains(final.from, "distroless") && !strings.Contains(final.from, "scratch") {
		t.Fatalf("final stage %s is not a small image", final.from)
	}
	// The builder's Go is the one go.mod asks for.
	gomod, _ := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	var goVersion string
	for _, l := range strings.Split(string(gomod), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			goVersion = strings.TrimSpace(v)
		}
	}
	builder := strings.TrimPrefix(strings.SplitN(stages[0].from, "-", 2)[0], "golang:")
	if olderVersion(builder, goVersion) {
		t.Fatalf("build stage Go %s is older than go.mod's %s", builder, goVersion)
	}
	if user == "" || user == "root" || strings.HasPrefix(user, "0") {
		t.Fatalf("final stage USER %q: want a non-root user", user)
	}
	var ep, cmdArgs []string
	if json.Unmarshal([]byte(entrypoint), &ep) != nil || len(ep) != 1 || json.Unmarshal([]byte(cmdLine), &cmdArgs) != nil {
		t.Fatalf("ENTRYPOINT %s / CMD %s: want exec form", entrypoint, cmdLine)
	}
	if !slices.Contains(copied, ep[0]) {
		t.Fatalf("ENTRYPOINT %s is not the binary copied from the build stage (%v)", ep[0], copied)
	}
	cmd := serveFlagsFor(t, cmdArgs)
	ports := strings.Fields(expose)
	for _, name := range []string{"http", "grpc", "metrics"} {
		if p := port(t, flag(t, cmd, name)); !slices.Contains(ports, p) {
			t.Fatalf("--%s port %s is not EXPOSEd (%v)", name, p, ports)
		}
	}
	// The image's default command and the KServe runtime agree.
	rt := yamlDocs(t, filepath.Join(deployDir, "kserve", "clusterservingruntime.yaml"))[0]
	var rtArgs []string
	for _, a := range at(t, rt, "spec", "containers", 0, "args").([]any) {
		rtArgs = append(rtArgs, a.(string))
	}
	rtCmd := serveFlagsFor(t, rtArgs)
	for _, name := range []string{"model-repository", "http", "grpc", "metrics"} {
		if flag(t, cmd, name) != flag(t, rtCmd, name) {
			t.Fatalf("--%s: image %s, runtime %s", name, flag(t, cmd, name), flag(t, rtCmd, name))
		}
	}
}

// olderVersion reports whether dotted version a is older than b.
func olderVersion(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}
