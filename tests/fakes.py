"""Stand-ins shared by tests of nodes built outside a program."""


class UncontactedReplay:
  """The replay client a learner node takes, for tests in which the node
  never takes a step: only its address is read, never contacted."""
  server_address = 'localhost:0'
