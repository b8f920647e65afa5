package van

import "github.com/rs/zerolog"

var nopLogger = zerolog.Nop()
