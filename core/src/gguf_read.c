/* gguf_read.c: placeholder, being written. */
