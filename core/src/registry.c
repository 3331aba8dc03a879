/* registry.c: placeholder, being written. */
