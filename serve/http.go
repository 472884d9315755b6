package serve

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/attnrun/attnrun/serve/oip"
)

// HTTPHandler serves the protocol's REST endpoints under /v2 and Triton's
// model repository extension. Request bodies above maxRequestBytes
// (after decompression) are refused with 413.
func (s *Server) HTTPHandler(maxRequestBytes int64) http.Handler {
	h := &httpAPI{s: s, maxBody: maxRequestBytes}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v2/health/live", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v2/health/ready", h.serverReady)
	mux.HandleFunc("GET /v2", h.serverMetadata)
	mux.HandleFunc("GET /v2/{$}", h.serverMetadata)
	for _, prefix := range []string{"/v2/models/{model}", "/v2/models/{model}/versions/{version}"} {
		mux.HandleFunc("GET "+prefix, h.modelMetadata)
		mux.HandleFunc("GET "+prefix+"/ready", h.modelReady)
		mux.HandleFunc("POST "+prefix+"/infer", h.infer)
		mux.HandleFunc(prefix, h.methodNotAllowed("GET"))
		mux.HandleFunc(prefix+"/infer", h.methodNotAllowed("POST"))
		mux.HandleFunc(prefix+"/ready", h.methodNotAllowed("GET"))
	}
	for _, p := range []string{"/v2/health/live", "/v2/health/ready", "/v2"} {
		mux.HandleFunc(p, h.methodNotAllowed("GET"))
	}
	mux.HandleFunc("POST /v2/repository/index", h.repositoryIndex)
	mux.HandleFunc("POST /v2/repository/models/{model}/load", h.load)
	mux.HandleFunc("POST /v2/repository/models/{model}/unload", h.unload)
	mux.HandleFunc("/v2/repository/", h.methodNotAllowed("POST"))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, oip.Errorf(oip.NotFound, "no endpoint %s %s (the protocol's endpoints are under /v2)", r.Method, r.URL.Path))
	})
	return mux
}

type httpAPI struct {
	s       *Server
	maxBody int64
}

func (h *httpAPI) methodNotAllowed(allowed string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allowed)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{fmt.Sprintf("%s %s: method not allowed (use %s)", r.Method, r.URL.Path, allowed)})
	}
}

// readiness answers a health request: 200 for true, 400 for false, as the
// protocol says (a 4xx status means false).
func readiness(w http.ResponseWriter, ok bool) {
	if ok {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusBadRequest)
}

func (h *httpAPI) serverReady(w http.ResponseWriter, r *http.Request) {
	readiness(w, h.s.Ready())
}

func (h *httpAPI) serverMetadata(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.s.ServerMetadata())
}

func (h *httpAPI) modelMetadata(w http.ResponseWriter, r *http.Request) {
	md, err := h.s.ModelMetadata(r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, md)
}

func (h *httpAPI) modelReady(w http.ResponseWriter, r *http.Request) {
	ok, err := h.s.ModelReady(r.PathValue("model"), r.PathValue("version"))
	if err != nil {
		writeError(w, err)
		return
	}
	readiness(w, ok)
}

func (h *httpAPI) infer(w http.ResponseWriter, r *http.Request) {
	if err := h.s.CheckModel(r.PathValue("model"), r.PathValue("version")); err != nil {
		writeError(w, err)
		return
	}
	req, err := h.decode(w, r)
	if err != nil {
		h.s.Refused(protoHTTP, r.PathValue("model"), r.PathValue("version"), err)
		writeError(w, err)
		return
	}
	resp, err := h.s.Infer(r.Context(), protoHTTP, r.PathValue("model"), r.PathValue("version"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	// The binary outputs are written from the tensors, not copied into the
	// body first.
	parts, jsonLength := oip.EncodeHTTPResponseParts(resp)
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	if jsonLength >= 0 {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set(oip.HeaderContentLength, strconv.Itoa(jsonLength))
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Content-Length", strconv.Itoa(size))
	w.WriteHeader(http.StatusOK)
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return // the client is gone
		}
	}
}

// decode reads and decodes an inference request.
func (h *httpAPI) decode(w http.ResponseWriter, r *http.Request) (*oip.Request, error) {
	body, err := h.readBody(w, r)
	if err != nil {
		return nil, err
	}
	headerLength := int64(-1)
	if v := r.Header.Get(oip.HeaderContentLength); v != "" {
		if headerLength, err = strconv.ParseInt(v, 10, 64); err != nil || headerLength < 0 {
			return nil, oip.Errorf(oip.InvalidArgument, "%s %q is not a byte count", oip.HeaderContentLength, v)
		}
	}
	return oip.DecodeHTTPRequest(body, headerLength, oip.Limits{MaxTensorBytes: h.s.opts.MaxTensorBytes})
}

// readBody reads a request body within the size limit, decompressing
// gzip and deflate (Content-Encoding) as Triton's clients may send.
func (h *httpAPI) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	tooLarge := oip.Errorf(oip.TooLarge, "the request body is over the limit of %d bytes (--max-request-bytes)", h.maxBody)
	if r.ContentLength > h.maxBody {
		return nil, tooLarge
	}
	var src io.Reader = http.MaxBytesReader(w, r.Body, h.maxBody)
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip", "deflate":
		raw, err := io.ReadAll(src)
		if err != nil {
			return nil, bodyError(err, tooLarge)
		}
		if enc == "gzip" {
			src, err = gzip.NewReader(bytes.NewReader(raw))
		} else {
			src, err = zlib.NewReader(bytes.NewReader(raw))
		}
		if err != nil {
			return nil, oip.Errorf(oip.InvalidArgument, "the %s body does not decompress: %v", enc, err)
		}
		src = io.LimitReader(src, h.maxBody+1)
	default:
		return nil, oip.Errorf(oip.InvalidArgument, "Content-Encoding %q is not supported (gzip, deflate or none)", enc)
	}
	buf := bytes.NewBuffer(make([]byte, 0, max(min(r.ContentLength, h.maxBody), 512)+1))
	if _, err := buf.ReadFrom(src); err != nil {
		return nil, bodyError(err, tooLarge)
	}
	if int64(buf.Len()) > h.maxBody {
		return nil, tooLarge
	}
	return buf.Bytes(), nil
}

func bodyError(err error, tooLarge error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge
	}
	return oip.Errorf(oip.InvalidArgument, "reading the request body: %v", err)
}

// IndexRequest is the body of POST v2/repository/index (optional).
type indexRequest struct {
	Ready bool `json:"ready"`
}

func (h *httpAPI) repositoryIndex(w http.ResponseWriter, r *http.Request) {
	var ir indexRequest
	if err := h.readJSON(w, r, &ir); err != nil {
		writeError(w, err)
		return
	}
	idx, err := h.s.Index(ir.Ready)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, idx)
}

// loadRequest is the body of a load or unload request (optional).
// Parameters are accepted for compatibility with Triton's clients; none
// changes what attnrun does except that a load always reloads.
type loadRequest struct {
	Parameters map[string]json.RawMessage `json:"parameters"`
}

func (h *httpAPI) load(w http.ResponseWriter, r *http.Request) {
	var lr loadRequest
	if err := h.readJSON(w, r, &lr); err != nil {
		writeError(w, err)
		return
	}
	if _, ok := lr.Parameters["config"]; ok {
		writeError(w, oip.Errorf(oip.InvalidArgument, "the \"config\" load parameter is not supported: edit the model's config.yaml in the repository"))
		return
	}
	if err := h.s.loadRequested(r.Context(), r.PathValue("model"), protoHTTP); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (h *httpAPI) unload(w http.ResponseWriter, r *http.Request) {
	var lr loadRequest
	if err := h.readJSON(w, r, &lr); err != nil {
		writeError(w, err)
		return
	}
	if err := h.s.Unload(r.PathValue("model")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// readJSON decodes an optional small JSON body (empty is fine).
func (h *httpAPI) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := h.readBody(w, r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return oip.Errorf(oip.InvalidArgument, "malformed JSON body: %v", err)
	}
	return nil
}

type errorBody struct {
	Error string `json:"error"`
}

// writeError answers with the protocol's error object and the status of
// the error's class.
func writeError(w http.ResponseWriter, err error) {
	writeJSON(w, oip.HTTPStatus(oip.ClassOf(err)), errorBody{err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
