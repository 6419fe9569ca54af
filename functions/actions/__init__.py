"""What a person can do from a notification or the status page: links, verbs, pages."""
