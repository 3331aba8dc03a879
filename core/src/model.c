/* model.c: placeholder, being written. */
