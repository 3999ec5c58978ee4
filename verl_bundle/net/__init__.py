"""The online host's network: HTTP sessions (http), index pages (index), parallel resumable
downloads (download) into a content-addressed cache (cache)."""
