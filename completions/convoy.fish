complete --keep-order --exclusive --command convoy --arguments "(COMPLETE=fish convoy -- (commandline --current-process --tokenize --cut-at-cursor) (commandline --current-token))"
