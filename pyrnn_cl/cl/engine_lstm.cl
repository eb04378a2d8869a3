/* Program: the lstm cell followed by the generic recurrence engine. */
#include "cells/lstm.cl"
#include "recurrence.cl"
