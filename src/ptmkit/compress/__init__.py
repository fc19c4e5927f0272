"""Model compression: smaller or faster task models made from a fine-tuned one."""
