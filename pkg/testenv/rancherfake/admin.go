package rancherfake

import (
	"encoding/json"
	"net/http"
)

// Admin returns a plain-HTTP control API over h, for a test that runs the fake in another
// process (a container) and cannot call its methods:
//
//	PUT /clusters  a JSON array of cluster objects: the new listing (SetClusters)
//	PUT /fail      {"status": 503}: every page answers with that status (FailPage(0, 503));
//	               {"status": 0} heals (Heal)
//	GET /ca        caPEM, the certificate the API is served with (a source Secret's caCert)
//	GET /requests  {"requests": n}, how many API requests were answered (any status), so that
//	               a test can wait for a client to have seen a change
func (h *Handler) Admin(caPEM []byte) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /clusters", func(w http.ResponseWriter, r *http.Request) {
		var clusters []map[string]any
		if err := json.NewDecoder(r.Body).Decode(&clusters); err != nil {
			http.Error(w, "decode the listing: "+err.Error(), http.StatusBadRequest)
			return
		}
		h.SetClusters(clusters...)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("PUT /fail", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Status int `json:"status"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "decode the failure: "+err.Error(), http.StatusBadRequest)
			return
		}
		if body.Status == 0 {
			h.Heal()
		} else {
			h.FailPage(0, body.Status)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /ca", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-pem-file")
		_, _ = w.Write(caPEM)
	})
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int{"requests": len(h.Requests())})
	})
	return mux
}
