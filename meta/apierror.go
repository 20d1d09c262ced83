package meta

import (
	"errors"

	"github.com/braidmq/braid/api"
)

// APIError is err, an error of the store about what (a name for the text),
// as the wire contract says it: ALREADY_EXISTS for ErrExists, NOT_FOUND
// for ErrNotFound, INTERNAL for anything else; nil for nil.
func APIError(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrExists):
		return api.Errorf(api.CodeAlreadyExists, "%s already exists", what)
	case errors.Is(err, ErrNotFound):
		return api.Errorf(api.CodeNotFound, "%s: %v", what, err)
	default:
		return api.Errorf(api.CodeInternal, "%s: %v", what, err)
	}
}
