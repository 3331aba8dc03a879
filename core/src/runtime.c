/* runtime.c: placeholder, being written. */
