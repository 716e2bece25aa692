//go:build tools

// Package crds only pins the Volcano API packages controller-gen generates CRDs from; it is
// never built (the `tools` tag keeps it out of every build but `go mod tidy`'s).
package crds

import _ "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
