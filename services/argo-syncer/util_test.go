package main

import (
	"errors"
	"strconv"
)

func strconvItoa(i int) string { return strconv.Itoa(i) }

func errorsAs(err error, target any) bool { return errors.As(err, target) }
