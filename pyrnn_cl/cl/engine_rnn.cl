/* Program: the rnn cell followed by the generic recurrence engine. */
#include "cells/rnn.cl"
#include "recurrence.cl"
