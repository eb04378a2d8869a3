/* Program: the gru cell followed by the generic recurrence engine. */
#include "cells/gru.cl"
#include "recurrence.cl"
