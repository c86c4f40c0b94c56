"""A message to an auditable evidence set and an answer: routing, the graph, conversations, personal memory, the web gateway, the answer cache, chat and audit."""
