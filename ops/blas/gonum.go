package blas

import gblas "gonum.org/v1/gonum/blas"

func trans(t bool) gblas.Transpose {
	if t {
		return gblas.Trans
	}
	return gblas.NoTrans
}
