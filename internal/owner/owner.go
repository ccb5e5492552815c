// Package owner carries a lock owner id in a context, for batchlock's
// ContextWithOwner and for redlock, which gives the locks it takes through
// several Clients one owner.
package owner

import "context"

type key struct{}

// NewContext returns ctx carrying the owner id.
func NewContext(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, key{}, id)
}

// FromContext returns the owner id ctx carries, if it carries one.
func FromContext(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(key{}).(string)
	return id, ok
}
