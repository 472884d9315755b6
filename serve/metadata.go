package serve

import (
	"github.com/attnrun/attnrun/ir"
	"github.com/attnrun/attnrun/serve/oip"
)

// Platform is the model platform reported in model metadata.
const Platform = "onnx"

// ServerMetadata is the server metadata response.
type ServerMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

// ServerMetadata describes the server.
func (s *Server) ServerMetadata() ServerMetadata {
	return ServerMetadata{Name: "attnrun", Version: s.opts.Version, Extensions: Extensions}
}

// TensorMetadata describes one input or output; symbolic dims are -1.
type TensorMetadata struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// ModelMetadata is the model metadata response.
type ModelMetadata struct {
	Name     string           `json:"name"`
	Versions []string         `json:"versions"`
	Platform string           `json:"platform"`
	Inputs   []TensorMetadata `json:"inputs"`
	Outputs  []TensorMetadata `json:"outputs"`
}

// ModelMetadata describes a model version ("": the highest loaded).
func (s *Server) ModelMetadata(name, version string) (*ModelMetadata, error) {
	l, err := s.lookup(name, version)
	if err != nil {
		return nil, err
	}
	defer l.users.Done()
	return &ModelMetadata{Name: name, Versions: s.versionsOf(name), Platform: Platform,
		Inputs: tensorMetadata(l.inputs), Outputs: tensorMetadata(l.outputs)}, nil
}

// ModelReady reports whether a model version is loaded and the server is
// not draining; an unknown model is an error.
func (s *Server) ModelReady(name, version string) (bool, error) {
	l, err := s.lookup(name, version)
	if err != nil {
		if oip.ClassOf(err) == oip.Unavailable {
			return false, nil
		}
		return false, err
	}
	l.users.Done()
	return s.Ready(), nil
}

// CheckModel returns the error a request for an unknown or unloaded model
// version gets, so that transports can answer it before decoding a body.
func (s *Server) CheckModel(name, version string) error {
	if !s.Ready() {
		return oip.Errorf(oip.Unavailable, "the server is shutting down")
	}
	l, err := s.lookup(name, version)
	if err == nil {
		l.users.Done()
	}
	return err
}

func tensorMetadata(vs []*ir.ValueInfo) []TensorMetadata {
	out := make([]TensorMetadata, len(vs))
	for i, vi := range vs {
		out[i] = TensorMetadata{Name: vi.Name, Datatype: oip.Datatype(vi.Type.DType), Shape: []int64{-1}}
		if vi.Type.RankKnown {
			out[i].Shape = make([]int64, len(vi.Type.Shape))
			for k, d := range vi.Type.Shape {
				out[i].Shape[k] = -1
				if d.Known() {
					out[i].Shape[k] = d.Value
				}
			}
		}
	}
	return out
}
