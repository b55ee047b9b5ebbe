// Command porcupine checks register histories exported by the PowerStore simulator
// with Porcupine, as an independent second opinion on test/lincheck.
//
// Usage: go run . <dir>
//
// Every *.json file in <dir> holds {"ops": [{"key", "client", "kind", "value", "call",
// "ret"}]}; "value" is a string or null (absent), "ret" is null for an operation that
// never returned (a crashed writer). One line per file: "<name> ok" or "<name> illegal"
// (or "unknown" on timeout). The exit status is 0 when every file was checked.
package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

type op struct {
	Key    string  `json:"key"`
	Client string  `json:"client"`
	Kind   string  `json:"kind"`
	Value  *string `json:"value"`
	Call   int64   `json:"call"`
	Ret    *int64  `json:"ret"`
}

type history struct {
	Ops []op `json:"ops"`
}

// input is what an operation asked; output what it saw (reads only).
type input struct {
	key   string
	write bool
	value string
}

// absent stands for "never written or deleted"; simulator value ids never contain NUL.
const absent = "\x00"

func value(v *string) string {
	if v == nil {
		return absent
	}
	return *v
}

var register = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range h {
			k := o.Input.(input).key
			if _, seen := byKey[k]; !seen {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], o)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return absent },
	Step: func(state, in, out interface{}) (bool, interface{}) {
		i := in.(input)
		if i.write {
			return true, i.value
		}
		return out.(string) == state.(string), state
	},
}

func check(path string) (porcupine.CheckResult, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return porcupine.Unknown, err
	}
	var h history
	if err := json.Unmarshal(raw, &h); err != nil {
		return porcupine.Unknown, err
	}
	ops := make([]porcupine.Operation, 0, len(h.Ops))
	clients := map[string]int{}
	for _, o := range h.Ops {
		if _, ok := clients[o.Client]; !ok {
			clients[o.Client] = len(clients)
		}
		// An operation that never returned may take effect any time after its call or
		// never; returning "at infinity" allows exactly that, since nothing observes a
		// write linearized after every completed operation.
		ret := int64(math.MaxInt64)
		if o.Ret != nil {
			ret = *o.Ret
		}
		in := input{key: o.Key, write: o.Kind == "write", value: value(o.Value)}
		var out interface{} = ""
		if o.Kind == "read" {
			out = value(o.Value)
		}
		ops = append(ops, porcupine.Operation{ClientId: clients[o.Client], Input: in, Call: o.Call, Output: out, Return: ret})
	}
	return porcupine.CheckOperationsTimeout(register, ops, 30*time.Second), nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run . <dir of JSON histories>")
		os.Exit(2)
	}
	files, err := filepath.Glob(filepath.Join(os.Args[1], "*.json"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	sort.Strings(files)
	failed := false
	for _, f := range files {
		res, err := check(f)
		name := filepath.Base(f)
		switch {
		case err != nil:
			fmt.Printf("%s error %v\n", name, err)
			failed = true
		case res == porcupine.Ok:
			fmt.Printf("%s ok\n", name)
		case res == porcupine.Illegal:
			fmt.Printf("%s illegal\n", name)
		default:
			fmt.Printf("%s unknown\n", name)
		}
	}
	if failed {
		os.Exit(1)
	}
}
