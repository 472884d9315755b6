package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/npy"
	"github.com/attnrun/attnrun/runtime/session"
)

// inputFlags are the flags of commands that feed a model.
type inputFlags struct {
	inputs []string
	dims   []string
	seed   uint64
}

func (f *inputFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVarP(&f.inputs, "input", "i", nil, "NAME=file.npy, NAME=file.pb (TensorProto), NAME=random[:1x512x768] or NAME=ones[:1x512] (every element 1, true for bool: a 0/1 attention_mask that keeps every key) (repeatable)")
	cmd.Flags().StringArrayVar(&f.dims, "dim", nil, "bind a symbolic dim for bare NAME=random and NAME=ones inputs, e.g. --dim seq=128 (repeatable; otherwise the other inputs' given shapes bind it)")
	cmd.Flags().Uint64Var(&f.seed, "seed", 1, "seed for random inputs")
}

// load reads the inputs for a model's declared inputs.
func (f *inputFlags) load(declared []*ir.ValueInfo, maxBytes int64) (map[string]*ir.Tensor, error) {
	specs, err := parseInputSpecs(f.inputs)
	if err != nil {
		return nil, err
	}
	dims, err := parseDims(f.dims)
	if err != nil {
		return nil, err
	}
	if err := checkDimNames(dims, declared); err != nil {
		return nil, err
	}
	l := &inputLoader{declared: declared, dims: dims, maxBytes: maxBytes, seed: f.seed}
	return l.load(specs)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// outputFileName maps an output name to a safe .npy file name.
func outputFileName(name string) string { return unsafeName.ReplaceAllString(name, "_") + ".npy" }

func newRunCmd(g *globalFlags) *cobra.Command {
	var in inputFlags
	var outDir, mapsDir string
	var asJSON bool
	var printLimit int
	cmd := &cobra.Command{
		Use:   "run MODEL.onnx --input NAME=SOURCE ...",
		Short: "Run a model once and print (or save) its outputs",
		Long: `run runs a model once on the given inputs. It prints each output's name,
element type, shape and first values (--print-limit, 0 for all), or with
--json every output in full as one JSON object:

  {"model": PATH, "outputs": [{"name": "y", "dtype": "float32", "shape": [2, 5, 32], "data": [...]}]}

where data is flat, in row-major order, floats in the fewest digits that read
back as the same value, and NaN and infinities (which JSON lacks) the strings
"NaN", "Infinity" and "-Infinity".

--out DIR writes one NAME.npy per output into DIR. --out - writes the .npy of
a model's only output to stdout (the text goes to stderr); it is a usage
error for a model with several outputs, with --json, or when stdout is a
terminal. The time of the run goes to stderr.`,
		Example: `  attnrun run models/s000_multi_head/model.onnx --input x=random:1x16x32
  attnrun run model.onnx -i x=x.npy -i mask=mask.npy --out results/
  attnrun run model.onnx -i x=x.npy --json > y.json
  attnrun run model.onnx -i x=x.npy --out - > y.npy`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if printLimit < 0 {
				return usageErrorf("--print-limit must be ≥ 0 (0 prints every value)")
			}
			toStdout := outDir == "-"
			if toStdout && asJSON {
				return usageErrorf("--out - and --json both write to stdout: give --out a directory")
			}
			if toStdout && isTerminal(stdout) {
				return usageErrorf("--out - writes a binary .npy to stdout, which is a terminal: redirect it (… --out - > y.npy)")
			}
			if outDir != "" && !toStdout {
				if err := makeOutputDir("--out", outDir); err != nil {
					return err
				}
			}
			if mapsDir != "" {
				if err := makeOutputDir("--attention-maps", mapsDir); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			opts := g.sessionOptions()
			opts.AttentionWeights = mapsDir != ""
			s, err := g.openWith(ctx, args[0], opts)
			if err != nil {
				return err
			}
			defer g.close(s)
			if outs := s.Outputs(); toStdout && len(outs) != 1 {
				return usageErrorf("--out - writes one .npy to stdout, and the model has %d outputs (%s): give --out a directory", len(outs), strings.Join(valueNames(outs), ", "))
			}
			inputs, err := in.load(s.Inputs(), g.maxTensorBytes)
			if err != nil {
				return err
			}
			start := time.Now()
			var ro session.RunOptions
			if mapsDir != "" {
				ro.Profile = &session.Profile{} // says which attention cores ran fused
			}
			outs, err := runIRWith(ctx, s, inputs, ro)
			if err != nil {
				return err
			}
			elapsed := time.Since(start)
			// The text report goes to stdout unless stdout carries data.
			report := stdout
			if asJSON || toStdout {
				report = stderr
			}
			if asJSON {
				if err := writeOutputsJSON(stdout, args[0], valueNames(s.Outputs()), outs); err != nil {
					return err
				}
			}
			for _, vi := range s.Outputs() {
				t := outs[vi.Name]
				if !asJSON {
					limit := printLimit
					if limit == 0 {
						limit = t.Len()
					}
					fmt.Fprintf(report, "%s: %v [%s] %s\n", vi.Name, t.DType, ir.ShapeString(t.Shape), t.Preview(limit))
				}
				switch {
				case toStdout:
					if err := npy.Write(stdout, t); err != nil {
						return fmt.Errorf("writing output %q to stdout: %w", vi.Name, err)
					}
				case outDir != "":
					path := filepath.Join(outDir, outputFileName(vi.Name))
					if err := npy.WriteFile(path, t); err != nil {
						return err
					}
					fmt.Fprintf(report, "  wrote %s\n", path)
				}
			}
			if mapsDir != "" {
				if err := writeAttentionMaps(report, stderr, s, args[0], inputs, outs, mapsDir, ro.Profile); err != nil {
					return err
				}
			}
			fmt.Fprintf(stderr, "ran in %.2f ms on %s\n", float64(elapsed.Microseconds())/1000, backendSummary(s))
			return nil
		},
	}
	in.register(cmd)
	cmd.Flags().StringVarP(&outDir, "out", "o", "", "write one NAME.npy per output into this directory (- : the only output's .npy to stdout)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print every output in full as one JSON object (NaN and ±Inf as the strings \"NaN\", \"Infinity\", \"-Infinity\")")
	cmd.Flags().IntVar(&printLimit, "print-limit", 8, "values of each output to print (0: all)")
	cmd.Flags().StringVar(&mapsDir, "attention-maps", "", "write every attention core's weights (.npy), one heat map per batch item and head (.png) and index.html into this directory")
	return cmd
}
