/* gguf_write.c: placeholder, being written. */
