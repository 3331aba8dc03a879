/* synth.c: placeholder, being written. */
