"""Reading source files the way a programmer would: which language a file is in
(`languages`), what it defines, named by a real parser (`definitions`), and what a project
manifest says about the project (`manifests`). Pure Python on top of tree-sitter, no Django,
so the agent side can use it too."""
