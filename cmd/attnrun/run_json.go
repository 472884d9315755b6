package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/attnrun/attnrun/ir"
)

// writeOutputsJSON writes `attnrun run --json`: one JSON object,
//
//	{"model": PATH, "outputs": [{"name": N, "dtype": "float32", "shape": [2, 5, 32], "data": [...]}, ...]}
//
// with every output in graph order and every element of its data, flat in
// row-major order. Floats are written in the fewest digits that read back
// as the same value of their own type (float16 and bfloat16 as their
// float32 value); JSON has no NaN or infinities, so those are the strings
// "NaN", "Infinity" and "-Infinity" (the protobuf JSON mapping's
// convention). Integers are exact (int64 and uint64 beyond 2^53 lose
// precision in readers that parse numbers as doubles, such as JavaScript).
func writeOutputsJSON(w io.Writer, model string, names []string, outs map[string]*ir.Tensor) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	mod, err := json.Marshal(model)
	if err != nil {
		return err
	}
	fmt.Fprintf(bw, `{"model":%s,"outputs":[`, mod)
	for i, name := range names {
		t := outs[name]
		if i > 0 {
			bw.WriteByte(',')
		}
		head, err := json.Marshal(struct {
			Name  string `json:"name"`
			DType string `json:"dtype"`
			Shape []int  `json:"shape"`
		}{name, t.DType.String(), append([]int{}, t.Shape...)})
		if err != nil {
			return err
		}
		bw.Write(head[:len(head)-1]) // without the closing brace
		bw.WriteString(`,"data":[`)
		if err := writeJSONData(bw, t); err != nil {
			return fmt.Errorf("output %q: %w", name, err)
		}
		bw.WriteString("]}")
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

// writeJSONData writes t's elements, comma-separated.
func writeJSONData(w *bufio.Writer, t *ir.Tensor) error {
	var buf []byte
	sep := func(i int) {
		if i > 0 {
			w.WriteByte(',')
		}
	}
	float := func(i int, v float64, bits int) {
		sep(i)
		switch {
		case math.IsNaN(v):
			w.WriteString(`"NaN"`)
		case math.IsInf(v, 1):
			w.WriteString(`"Infinity"`)
		case math.IsInf(v, -1):
			w.WriteString(`"-Infinity"`)
		default:
			buf = strconv.AppendFloat(buf[:0], v, 'g', -1, bits)
			w.Write(buf)
		}
	}
	switch d := t.Data.(type) {
	case []float32:
		for i, v := range d {
			float(i, float64(v), 32)
		}
	case []float64:
		for i, v := range d {
			float(i, v, 64)
		}
	case []uint16:
		for i, v := range d {
			switch t.DType {
			case ir.Float16:
				float(i, float64(ir.Float16ToFloat32(v)), 32)
			case ir.BFloat16:
				float(i, float64(ir.BFloat16ToFloat32(v)), 32)
			default:
				sep(i)
				w.Write(strconv.AppendUint(buf[:0], uint64(v), 10))
			}
		}
	case []bool:
		for i, v := range d {
			sep(i)
			w.WriteString(strconv.FormatBool(v))
		}
	case []string:
		for i, v := range d {
			sep(i)
			b, err := json.Marshal(v)
			if err != nil {
				return err
			}
			w.Write(b)
		}
	case []uint64:
		for i, v := range d {
			sep(i)
			w.Write(strconv.AppendUint(buf[:0], v, 10))
		}
	default:
		ints, err := t.AsInt64s()
		if err != nil {
			return err
		}
		for i, v := range ints {
			sep(i)
			w.Write(strconv.AppendInt(buf[:0], v, 10))
		}
	}
	return nil
}
