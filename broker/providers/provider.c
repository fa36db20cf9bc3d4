/*
 * Which wire format speaks for a configured provider type.  Alone in its
 * file so that only the code that needs every format (the controller)
 * links them all.
 */

#include "broker/providers/provider.h"

const struct provider_ops *
provider_ops(enum provider_type type)
{
	switch (type) {
	case PROVIDER_OPENAI:
	case PROVIDER_AZURE_OPENAI:
	case PROVIDER_OPENAI_COMPATIBLE:
		return &openai_ops;
	case PROVIDER_ANTHROPIC:
		return &anthropic_ops;
	case PROVIDER_OLLAMA:
		return &ollama_ops;
	case PROVIDER_GEMINI:
		return &gemini_ops;
	}
	return NULL;
}
