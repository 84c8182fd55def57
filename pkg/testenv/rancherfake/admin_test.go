package rancherfake

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAdminControlsTheAPI drives a Handler through its Admin API only, as the container tests
// do from outside the fake's process, and checks what the Rancher API answers.
func TestAdminControlsTheAPI(t *testing.T) {
	h := NewHandler("tok-admin", 1)
	api := httptest.NewServer(h)
	t.Cleanup(api.Close)
	admin := httptest.NewServer(h.Admin([]byte("the CA")))
	t.Cleanup(admin.Close)

	put(t, admin.URL+"/clusters", `[{"id":"c-1","name":"a","driver":"gke"},{"id":"c-2","name":"b","driver":"gke"},{"id":"c-3","name":"c","driver":"eks"}]`, http.StatusNoContent)
	if status, ids := list(t, api.URL+"/v3/clusters?driver=gke"); status != http.StatusOK || ids != "c-1" {
		t.Errorf("first page of driver=gke: %d %q, want 200 c-1", status, ids)
	}
	if status, ids := list(t, api.URL+"/v3/clusters?driver=gke&marker=1"); status != http.StatusOK || ids != "c-2" {
		t.Errorf("second page of driver=gke: %d %q, want 200 c-2", status, ids)
	}

	put(t, admin.URL+"/fail", `{"status":503}`, http.StatusNoContent)
	for _, query := range []string{"", "?marker=1"} {
		if status, _ := list(t, api.URL+"/v3/clusters"+query); status != http.StatusServiceUnavailable {
			t.Errorf("listing%s after PUT /fail 503: status %d, want 503 on every page", query, status)
		}
	}
	put(t, admin.URL+"/fail", `{"status":0}`, http.StatusNoContent)
	if status, ids := list(t, api.URL+"/v3/clusters"); status != http.StatusOK || ids != "c-1" {
		t.Errorf("listing after PUT /fail 0: %d %q, want 200 c-1", status, ids)
	}

	var count struct {
		Requests int `json:"requests"`
	}
	if err := json.Unmarshal(get(t, admin.URL+"/requests"), &count); err != nil || count.Requests != 5 {
		t.Errorf("GET /requests: %+v (%v), want 5 API requests", count, err)
	}
	if ca := string(get(t, admin.URL+"/ca")); ca != "the CA" {
		t.Errorf("GET /ca = %q, want the PEM it was given", ca)
	}
	put(t, admin.URL+"/clusters", `{"not":"a list"}`, http.StatusBadRequest)
}

// list GETs a listing with the handler's token and returns the status and the ids on the page.
func list(t *testing.T, url string) (int, string) {
	t.Helper()
	status, body := call(t, http.MethodGet, url, "", "Bearer tok-admin")
	var page struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &page)
	var ids []string
	for _, c := range page.Data {
		ids = append(ids, c.ID)
	}
	return status, strings.Join(ids, ",")
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	_, body := call(t, http.MethodGet, url, "", "")
	return body
}

func put(t *testing.T, url, body string, want int) {
	t.Helper()
	if status, _ := call(t, http.MethodPut, url, body, ""); status != want {
		t.Errorf("PUT %s %s: status %d, want %d", url, body, status, want)
	}
}

// call sends one request (with an Authorization header unless it is "") and returns the
// status and the body of the answer.
func call(t *testing.T, method, url, body, authorization string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", method, url, err)
	}
	return resp.StatusCode, data
}
