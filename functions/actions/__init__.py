"""What a person can do from a notification or the status page (issue 20): links, verbs, pages."""
