package kit

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ReadEvents reads on_event's file: one JSON object a line.
func ReadEvents(t *testing.T, file string) []map[string]any {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "%q is not one JSON object", sc.Text())
		out = append(out, m)
	}
	return out
}
