"""What a verdict is: head's cells against base's under the policies (comparison), the Verdict
and the rule of evidence it is judged by (evidence), the words a verdict says (status)."""
