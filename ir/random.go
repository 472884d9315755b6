package ir

import (
	"fmt"
	"math/rand/v2"
)

// RandomTensor makes a tensor of random data from a seeded generator (the
// same seed, the same data): floats uniform in [-1, 1); integers 0 or 1 (1
// three times in four, the "keep" value of 0/1 masks); bools true one time
// in four (True means "masked" in the PyTorch masks these models take). Masks must leave every attention row
// something to attend to, so index 0 of the last axis is always "keep"
// (integer 1, bool false). This is the data of `attnrun run -i NAME=random`
// and of the serve load scripts' requests.
func RandomTensor(dt DType, shape []int, seed uint64) (*Tensor, error) {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	if !dt.Known() || dt == String {
		return nil, fmt.Errorf("cannot make random %v data", dt)
	}
	t := NewTensor(dt, shape)
	switch d := t.Data.(type) {
	case []float32:
		for i := range d {
			d[i] = r.Float32()*2 - 1
		}
	case []float64:
		for i := range d {
			d[i] = r.Float64()*2 - 1
		}
	case []bool:
		for i := range d {
			d[i] = r.IntN(4) == 0 && !firstOfRow(i, shape)
		}
	case []uint16:
		switch dt {
		case Float16:
			for i := range d {
				d[i] = Float32ToFloat16(r.Float32()*2 - 1)
			}
		case BFloat16:
			for i := range d {
				d[i] = Float32ToBFloat16(r.Float32()*2 - 1)
			}
		default:
			fillInts(d, shape, r)
		}
	case []int64:
		fillInts(d, shape, r)
	case []int32:
		fillInts(d, shape, r)
	case []int16:
		fillInts(d, shape, r)
	case []int8:
		fillInts(d, shape, r)
	case []uint8:
		fillInts(d, shape, r)
	case []uint32:
		fillInts(d, shape, r)
	case []uint64:
		fillInts(d, shape, r)
	}
	return t, nil
}

func fillInts[T int64 | int32 | int16 | int8 | uint8 | uint16 | uint32 | uint64](d []T, shape []int, r *rand.Rand) {
	for i := range d {
		if r.IntN(4) != 0 || firstOfRow(i, shape) {
			d[i] = 1
		}
	}
}

// firstOfRow reports whether flat index i is at position 0 of the last axis.
func firstOfRow(i int, shape []int) bool {
	if len(shape) == 0 || shape[len(shape)-1] == 0 {
		return true
	}
	return i%shape[len(shape)-1] == 0
}

// OnesTensor makes a tensor whose every element is 1 (true for bool): an
// attention mask that keeps every key, the data of `attnrun run -i
// NAME=ones`.
func OnesTensor(dt DType, shape []int) (*Tensor, error) {
	if !dt.Known() || dt == String || dt.NarrowFloat() {
		return nil, fmt.Errorf("cannot make %v data of ones", dt)
	}
	t := NewTensor(dt, shape)
	switch d := t.Data.(type) {
	case []float32:
		fill(d, 1)
	case []float64:
		fill(d, 1)
	case []bool:
		fill(d, true)
	case []uint16:
		switch dt {
		case Float16:
			fill(d, Float32ToFloat16(1))
		case BFloat16:
			fill(d, Float32ToBFloat16(1))
		default:
			fill(d, 1)
		}
	case []int64:
		fill(d, 1)
	case []int32:
		fill(d, 1)
	case []int16:
		fill(d, 1)
	case []int8:
		fill(d, 1)
	case []uint8:
		fill(d, 1)
	case []uint32:
		fill(d, 1)
	case []uint64:
		fill(d, 1)
	default:
		return nil, fmt.Errorf("cannot make %v data of ones", dt)
	}
	return t, nil
}

func fill[T any](d []T, v T) {
	for i := range d {
		d[i] = v
	}
}
