package repo

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is a model's optional config.yaml. Fields left out take the
// server's defaults (its flags). Unknown fields are an error.
//
//	backend: cpu            # attnrun backend (attnrun backends lists them)
//	instances: 2            # backend instances, runs in parallel
//	threads: 1              # compute threads per instance
//	worker_spin: 50us       # how long idle compute workers poll before parking
//	max_queue: 64           # requests waiting before 503 / UNAVAILABLE
//	version_policy: {latest: 1}   # or {all: true} or {specific: [1, 3]}
//	dynamic_batching:
//	  max_batch_size: 8     # rows stacked along dim 0; 0 or 1: off
//	  max_queue_delay: 2ms
type Config struct {
	Backend         string         `yaml:"backend"`
	Instances       int            `yaml:"instances"`
	Threads         int            `yaml:"threads"`
	WorkerSpin      *Duration      `yaml:"worker_spin"`
	MaxQueue        int            `yaml:"max_queue"`
	VersionPolicy   *VersionPolicy `yaml:"version_policy"`
	DynamicBatching *Batching      `yaml:"dynamic_batching"`
}

// VersionPolicy chooses the versions of a model to serve; at most one
// field is set. The zero policy serves the latest version.
type VersionPolicy struct {
	// Latest serves the highest Latest versions.
	Latest int `yaml:"latest"`
	// All serves every version.
	All bool `yaml:"all"`
	// Specific serves these versions.
	Specific []int64 `yaml:"specific"`
}

// String renders the policy as the --version-policy flag spells it.
func (p VersionPolicy) String() string {
	switch {
	case p.All:
		return "all"
	case len(p.Specific) > 0:
		s := make([]string, len(p.Specific))
		for i, v := range p.Specific {
			s[i] = fmt.Sprint(v)
		}
		return "specific:" + strings.Join(s, ",")
	case p.Latest > 1:
		return fmt.Sprintf("latest:%d", p.Latest)
	}
	return "latest"
}

// ParseVersionPolicy reads --version-policy: "latest", "latest:N" or
// "all".
func ParseVersionPolicy(s string) (VersionPolicy, error) {
	switch {
	case s == "latest":
		return VersionPolicy{Latest: 1}, nil
	case s == "all":
		return VersionPolicy{All: true}, nil
	case strings.HasPrefix(s, "latest:"):
		var n int
		if _, err := fmt.Sscanf(s, "latest:%d", &n); err == nil && n >= 1 && fmt.Sprintf("latest:%d", n) == s {
			return VersionPolicy{Latest: n}, nil
		}
	}
	return VersionPolicy{}, fmt.Errorf("version policy %q: want latest, latest:N (N ≥ 1) or all", s)
}

func (p *VersionPolicy) check() error {
	set := 0
	if p.Latest != 0 {
		set++
		if p.Latest < 1 {
			return fmt.Errorf("version_policy: latest must be ≥ 1, not %d", p.Latest)
		}
	}
	if p.All {
		set++
	}
	if p.Specific != nil {
		set++
		if len(p.Specific) == 0 {
			return errors.New("version_policy: specific lists no versions")
		}
		for _, v := range p.Specific {
			if v <= 0 {
				return fmt.Errorf("version_policy: version %d is not a positive integer", v)
			}
		}
	}
	if set != 1 {
		return errors.New("version_policy: set exactly one of latest, all, specific")
	}
	return nil
}

// Batching configures dynamic batching.
type Batching struct {
	// MaxBatchSize is the most dim-0 rows one run stacks (≤ 1: off).
	MaxBatchSize int `yaml:"max_batch_size"`
	// MaxQueueDelay is how long a request may wait for others to join its
	// batch, e.g. "2ms".
	MaxQueueDelay Duration `yaml:"max_queue_delay"`
}

// Duration is a time.Duration written as Go writes durations ("500us").
type Duration time.Duration

// UnmarshalYAML reads a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration ≥ 0 like 2ms or 500us", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// ParseConfig reads a config.yaml strictly: unknown fields and values out
// of range are errors.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, yamlError(err)
	}
	switch {
	case c.Instances < 0:
		return Config{}, fmt.Errorf("instances must be ≥ 1, not %d", c.Instances)
	case c.Threads < 0:
		return Config{}, fmt.Errorf("threads must be ≥ 0, not %d", c.Threads)
	case c.MaxQueue < 0:
		return Config{}, fmt.Errorf("max_queue must be ≥ 1, not %d", c.MaxQueue)
	case c.DynamicBatching != nil && c.DynamicBatching.MaxBatchSize < 0:
		return Config{}, fmt.Errorf("dynamic_batching: max_batch_size must be ≥ 0, not %d", c.DynamicBatching.MaxBatchSize)
	}
	if c.VersionPolicy != nil {
		if err := c.VersionPolicy.check(); err != nil {
			return Config{}, err
		}
	}
	return c, nil
}

// unknownField matches yaml.v3's report of a field that KnownFields refuses:
// "line 2: field instnces not found in type repo.Config".
var unknownField = regexp.MustCompile(`field (\S+) not found in type repo\.(\w+)`)

// configTypes are the types config.yaml decodes into, by the name yaml.v3
// gives them in its errors.
var configTypes = map[string]reflect.Type{
	"Config":        reflect.TypeFor[Config](),
	"VersionPolicy": reflect.TypeFor[VersionPolicy](),
	"Batching":      reflect.TypeFor[Batching](),
}

// yamlError turns yaml.v3's decoding error into one line a user can act on:
// without its "yaml: unmarshal errors:" preamble and line breaks, and with an
// unknown field named as such beside the fields that are known there, instead
// of this package's Go type name.
func yamlError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = unknownField.ReplaceAllStringFunc(strings.TrimSpace(m), func(s string) string {
			sub := unknownField.FindStringSubmatch(s)
			t, ok := configTypes[sub[2]]
			if !ok {
				return fmt.Sprintf("unknown field %q", sub[1])
			}
			known := make([]string, 0, t.NumField())
			for f := range t.Fields() {
				if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag != "" {
					known = append(known, tag)
				}
			}
			return fmt.Sprintf("unknown field %q (known there: %s)", sub[1], strings.Join(known, ", "))
		})
	}
	return errors.New(strings.Join(msgs, "; "))
}
